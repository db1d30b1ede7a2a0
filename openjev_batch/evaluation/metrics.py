"""Scores of an eval: accuracy with Wilson intervals, Brier, top-label ECE, NLL, temperature scaling.

Metrics over the n answered questions (P_i the renormalised label distribution, y_i the gold index,
ŷ_i = argmax P_i, conf_i = P_i[ŷ_i]):
- accuracy = mean 1[ŷ = y], with the 95 % Wilson (1927) score interval
  (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n), z = 1.959964.
- Brier (1950): binary sets (every question yes/no) mean (p_true − 1[gold = true])²; multiple choice and
  classification (a classifier head's softmax over its labels, any K, 2 included: no label is "true")
  mean Σ_k (P_ik − 1[k = y_i])² (Brier's original sum over classes; for K = 2 it is twice the binary form).
- ECE (Guo et al. 2017, top-label): 15 equal-width bins B_m = {i: conf_i ∈ ((m−1)/15, m/15]} over the
  confidence of the *predicted* class; ECE = Σ_m |B_m|/n · |acc(B_m) − mean conf(B_m)|. Binary sets also
  get ``ece_p_true``: the same bins over p_true, |share of gold true − mean p_true| per bin.
- NLL = mean −ln P_i[y_i].
- Temperature scaling (Guo et al. 2017): P_i(T) = softmax(ln P_i / T) (the same as dividing the label
  logprobs by T); T minimises NLL on the fit split (log-grid over [0.05, 20], then golden-section search;
  NLL is convex in 1/T). Metrics are reported on the held-out split before and after scaling. The
  calibration split ranks sha256("<seed>:calibrate:<id>") (tasks.rank).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .tasks import LETTERS, rank

Z95 = 1.959963984540054
N_BINS = 15


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson (1927) score interval for k successes in n trials; (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def pad(probs: list[list[float]]) -> np.ndarray:
    """Ragged distributions → n × K_max array, zero-padded."""
    out = np.zeros((len(probs), max((len(p) for p in probs), default=2)))
    for i, p in enumerate(probs):
        out[i, : len(p)] = p
    return out


def reliability(conf: np.ndarray, hit: np.ndarray, n_bins: int = N_BINS) -> tuple[float, list[dict]]:
    """(ECE, bins) for confidences `conf` and outcomes `hit` (0/1): bins ((m−1)/M, m/M], conf 0 in the first."""
    idx = np.clip(np.ceil(conf * n_bins - 1e-9).astype(int) - 1, 0, n_bins - 1)  # an edge m/M goes to bin m
    bins, ece = [], 0.0
    for m in range(n_bins):
        sel = idx == m
        nb = int(sel.sum())
        acc: float | None = None
        cf: float | None = None
        if nb:
            acc, cf = float(hit[sel].mean()), float(conf[sel].mean())
            ece += nb / len(conf) * abs(acc - cf)
        bins.append({"lo": m / n_bins, "hi": (m + 1) / n_bins, "n": nb, "accuracy": acc, "confidence": cf})
    return float(ece), bins


def metrics(P: np.ndarray, y: np.ndarray, binary: bool, n_bins: int = N_BINS) -> dict[str, Any]:
    """Accuracy (+ Wilson 95 %), Brier, top-label ECE and its bins, NLL (binary: + ece_p_true and its bins)."""
    n = len(y)
    pred = P.argmax(1)
    hit = (pred == y).astype(float)
    conf = P[np.arange(n), pred]
    onehot = np.zeros_like(P)
    onehot[np.arange(n), y] = 1.0
    if binary:
        brier = float(np.mean((P[:, 0] - onehot[:, 0]) ** 2))
    else:
        brier = float(np.mean(((P - onehot) ** 2).sum(1)))
    ece, bins = reliability(conf, hit, n_bins)
    k = int(hit.sum())
    out = {
        "n": n,
        "correct": k,
        "accuracy": k / n,
        "ci95": wilson(k, n),
        "brier": brier,
        "ece": ece,
        "nll": float(np.mean(-np.log(np.clip(P[np.arange(n), y], 1e-300, None)))),
        "mean_p_answer_right": float(conf[hit == 1].mean()) if k else None,
        "mean_p_answer_wrong": float(conf[hit == 0].mean()) if k < n else None,
        "bins": bins,
    }
    if binary:
        out["ece_p_true"], out["bins_p_true"] = reliability(P[:, 0], onehot[:, 0], n_bins)
    return out


def scale(P: np.ndarray, t: float) -> np.ndarray:
    """softmax(ln P / T) row-wise; zero (padding) entries stay zero."""
    with np.errstate(divide="ignore"):
        z = np.where(P > 0, np.log(np.clip(P, 1e-300, None)), -np.inf) / t
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def _nll(P: np.ndarray, y: np.ndarray, t: float) -> float:
    return float(np.mean(-np.log(np.clip(scale(P, t)[np.arange(len(y)), y], 1e-300, None))))


T_MIN, T_MAX = 0.05, 20.0


def fit_temperature(P: np.ndarray, y: np.ndarray) -> float:
    """The T > 0 minimising NLL of softmax(ln P / T): log-grid over [T_MIN, T_MAX], then golden section.
    A result at T_MAX means NLL still falls as the answers flatten to uniform: the probabilities carry no
    usable signal (or point the wrong way); the report says so."""
    grid = np.exp(np.linspace(math.log(T_MIN), math.log(T_MAX), 97))
    i = int(np.argmin([_nll(P, y, t) for t in grid]))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        c, d = b - g * (b - a), a + g * (b - a)
        if _nll(P, y, math.exp(c)) <= _nll(P, y, math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


def score(
    records: list[dict], calibrate: float | None = None, seed: int = 42, labels: list[str] | None = None
) -> dict[str, Any]:
    """Score the per-question output rows (with the kept `gold`/`category` columns). Errors are counted and
    left out of every metric. `calibrate`: share of questions for the temperature fit (seeded split).
    `labels`: a classifier head's label names (its rows' `probs` and `gold` index them; no label mass or
    confidence columns), None for the label-logprobs rows."""
    ok = [r for r in records if r["error"] is None]
    errors = [r["error"] for r in records if r["error"] is not None]
    if not ok:
        raise ValueError(f"no question was answered ({len(errors)} errors; first: {errors[:1]})")
    P, y = pad([r["probs"] for r in ok]), np.array([int(r["gold"]) for r in ok])
    binary = labels is None and all(r["type"] == "noul" for r in ok)
    if labels is not None and P.shape[1] != len(labels):
        raise ValueError(f"{P.shape[1]} probabilities per row for {len(labels)} labels ({', '.join(labels)})")
    names = labels if labels is not None else ["true", "false"] if binary else LETTERS[: P.shape[1]]
    K = np.array([len(r["probs"]) for r in ok])
    hit = P.argmax(1) == y
    rep: dict[str, Any] = {
        "questions": len(records),
        "answered": len(ok),
        "errors": len(errors),
        "first_errors": errors[:5],
        "kind": "classification" if labels is not None else "yes/no" if binary else "multiple choice",
        "overall": metrics(P, y, binary),
        "chance_accuracy": float(np.mean(1.0 / K)),
        # the share of the most frequent gold answer: what always answering it scores
        "majority_accuracy": float(max(np.mean(y == j) for j in range(len(names))))
        if binary or labels is not None
        else None,
        "gold_true_share": float(np.mean(y == 0)) if binary else None,
        # every option or label, a never-chosen one too (its share 0)
        "predicted_share": {n: float(np.mean(P.argmax(1) == j)) for j, n in enumerate(names)},
        **_readout_means(ok, hit, labels is None),
    }
    rep["categories"] = {}
    for c in sorted({r["category"] for r in ok}):
        sel = np.array([r["category"] == c for r in ok])
        k, n = int(hit[sel].sum()), int(sel.sum())
        rep["categories"][c] = {"n": n, "correct": k, "accuracy": k / n, "ci95": wilson(k, n)}
    rep["temperature"] = _temperature(ok, P, y, binary, calibrate, seed) if calibrate else None
    return rep


def _readout_means(ok: list[dict], hit: np.ndarray, logprobs: bool) -> dict[str, Any]:
    """The label-logprobs readout's own columns averaged: label mass, and the product's confidence of right
    and wrong answers (None for a classifier head, whose rows have neither)."""
    if not logprobs:
        keys = ("mean_label_mass", "label_mass_below_half", "mean_confidence_right", "mean_confidence_wrong")
        return dict.fromkeys(keys)
    mass = np.array([r["label_mass"] for r in ok])
    cconf = np.array([r["confidence"] for r in ok])
    return {
        "mean_label_mass": float(mass.mean()),
        "label_mass_below_half": float(np.mean(mass < 0.5)),
        "mean_confidence_right": float(cconf[hit].mean()) if hit.any() else None,
        "mean_confidence_wrong": float(cconf[~hit].mean()) if (~hit).any() else None,
    }


def _temperature(
    ok: list[dict], P: np.ndarray, y: np.ndarray, binary: bool, calibrate: float, seed: int
) -> dict[str, Any]:
    """One temperature fitted on the seeded `calibrate` share, metrics on the rest before and after."""
    order = sorted(range(len(ok)), key=lambda i: rank(seed, "calibrate:" + str(ok[i]["id"])))
    n_fit = round(calibrate * len(ok))
    if not 0 < n_fit < len(ok):
        raise ValueError(f"calibrate={calibrate} leaves no question to fit on or to evaluate")
    fit, ev = np.array(sorted(order[:n_fit])), np.array(sorted(order[n_fit:]))
    t = fit_temperature(P[fit], y[fit])
    return {
        "T": t,
        "at_search_bound": bool(t >= T_MAX * 0.999 or t <= T_MIN * 1.001),
        "fit_share": calibrate,
        "n_fit": len(fit),
        "n_eval": len(ev),
        "before": metrics(P[ev], y[ev], binary),
        "after": metrics(scale(P[ev], t), y[ev], binary),
    }
