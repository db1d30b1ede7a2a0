"""`calibrate`: fit a calibration file (readouts/label_logprobs/calibration.py has its format) on the labelled
records of a `run` output (a kept gold column) or an `eval` folder (calibration_labelled.py reads them).

Per question id: the temperature minimising NLL (metrics.fit_temperature), then, on the calibrated
top probability p, the abstain threshold τ (abstain when p < τ): the lowest τ whose kept answers reach the
target precision (the most coverage that does), or the τ that keeps the target share of answers. The
selective-accuracy/coverage curve (accuracy of the answers kept at 10 %, 20 %, … 100 % coverage, most
confident first) is written with each entry and printed.

What a target promises (issue 42.2: on a model at chance a 0.9 target was "met" by 1 kept answer of 300): a
cut meets `--target-precision P` only when it keeps at least `min_kept` answers (MIN_KEPT, `--min-kept`) and
the 95 % Wilson lower bound of their accuracy (metrics.wilson, as `eval` reports) is ≥ P; a coverage target
only when it keeps at least `min_kept`. A missed target writes τ = 1 (every row of that question abstains)
and a `note` saying so, with the precision the data supports. Each entry has its kept answers as counts
(`kept` of `n`), the Wilson interval of their accuracy, and the ECE and Brier of the fit rows (raw and
calibrated); `holdout` (`--holdout F`): the fit uses the other rows, and the held-out share's ECE, Brier,
coverage and selective accuracy are written beside them.

A `type: multi` question gets a P(yes) threshold instead (calibration_multi.py).
"""

from __future__ import annotations

import math
from typing import Any, cast

from ..errors import ConfigError
from ..readouts.label_logprobs.calibration import (
    CURVE_POINTS,
    FORMAT,
    MIN_KEPT,
    CalibrationEntry,
    CalibrationFile,
)
from .calibration_multi import fit_multi, holdout_multi, multi_lines
from .metrics import T_MAX, fit_temperature, metrics, scale, wilson
from .tasks import rank

MIN_ROWS = 2  # per question: a temperature needs answers to fit on
HOLDOUT_SEED = 42  # the held-out split ranks sha256("42:calibrate-holdout:<row id>") (tasks.rank)


def fit(
    records: list[dict[str, Any]],
    precision: float | None = None,
    coverage: float | None = None,
    min_kept: int = MIN_KEPT,
    holdout: float | None = None,
    unfitted: str = "error",
) -> dict:
    """The calibration file's document (calibration.CalibrationFile, constructed here and so checked as the
    reader checks it) of the labelled records; `holdout`: the share of each question's rows (seeded by row id)
    left out of the fit and scored with it; `unfitted`: what `run` does with a question it has no entry for.
    Raises ConfigError."""
    if (precision is None) == (coverage is None):
        raise ConfigError("calibrate: give one of --target-precision and --target-coverage")
    if holdout is not None and not 0 < holdout < 1:
        raise ConfigError(f"calibrate: --holdout must be between 0 and 1 (a share of the rows), got {holdout}")
    by_q: dict[str, list[dict]] = {}
    for r in records:
        by_q.setdefault(r["qid"], []).append(r)
    questions: dict[str, CalibrationEntry] = {}
    for qid, rs in by_q.items():
        types, lists = {r["type"] for r in rs}, {r["options"] for r in rs}
        sizes = {len(o) for o in lists}
        if len(types) > 1 or len(sizes) > 1:
            raise ConfigError(
                f"calibrate: question {qid!r} is asked as {len(types)} type(s) with {len(sizes)} option "
                "count(s); one temperature is fitted per question id, on one type and option count"
            )
        # options that differ row to row (a benchmark's per-row option texts): the entry holds their count
        options = (
            {"options": list(rs[0]["options"])}
            if len(lists) == 1
            else {"options": None, "n_options": sizes.pop()}
        )
        fit_rs, held = _split(qid, rs, holdout)
        if len(fit_rs) < MIN_ROWS:
            raise ConfigError(
                f"calibrate: question {qid!r}: {len(fit_rs)} labelled answer(s) to fit on, at least {MIN_ROWS}"
            )
        if rs[0]["type"] == "multi":  # a P(yes) threshold for its labels (calibration_multi.py)
            e = {"type": "multi", **options, **fit_multi(fit_rs, precision, coverage, min_kept)}
            if held:
                e["holdout"] = holdout_multi(held, e["threshold"])
        else:
            e = _fit_one(rs[0]["type"], options, fit_rs, precision, coverage, min_kept)
            if held:
                e["holdout"] = _scored(held, e)
        questions[qid] = CalibrationEntry.model_validate(e)  # the applied fields, the rest its report
    target: dict[str, Any] = {"precision": precision} if precision is not None else {"coverage": coverage}
    target["min_kept"] = min_kept
    held_out = {"share": holdout, "seed": HOLDOUT_SEED} if holdout is not None else None
    return CalibrationFile(format=FORMAT, unfitted=unfitted, target=target, questions=questions,
                           holdout=held_out).document()  # fmt: skip


def _split(qid: str, rs: list[dict], holdout: float | None) -> tuple[list[dict], list[dict]]:
    """(fit rows, held-out rows): the `holdout` share of the rows with the lowest sha256 rank of their row
    id (every question of a row on the same side; the same split on every run)."""
    if holdout is None:
        return rs, []
    keys = [rank(HOLDOUT_SEED, f"calibrate-holdout:{r.get('id') if r.get('id') is not None else i}")
            for i, r in enumerate(rs)]  # fmt: skip
    order = sorted(range(len(rs)), key=keys.__getitem__)
    k = round(holdout * len(rs))
    if not 0 < k < len(rs):
        raise ConfigError(f"calibrate: question {qid!r}: --holdout {holdout} of {len(rs)} rows leaves no row "
                          "to fit on or to check")  # fmt: skip
    cut = set(order[:k])
    return [r for i, r in enumerate(rs) if i not in cut], [r for i, r in enumerate(rs) if i in cut]


def _arrays(rs: list[dict]):
    import numpy as np

    return np.array([r["probs"] for r in rs], dtype=float), np.array([r["gold"] for r in rs])


def _quality(P, y, binary: bool) -> dict[str, float]:
    m = metrics(P, y, binary)
    return {"ece": m["ece"], "brier": m["brier"]}


def _fit_one(qtype: str, options: dict, rs: list[dict], precision, coverage, min_kept: int) -> dict[str, Any]:
    import numpy as np

    P, y = _arrays(rs)
    t = fit_temperature(P, y)
    cal = scale(P, t)
    top = cal.max(1)
    right = cal.argmax(1) == y
    binary = qtype == "noul"
    raw = _quality(P, y, binary)
    return {"type": qtype, **options, "temperature": t,
            **_threshold(top, right, precision, coverage, min_kept), "n": len(rs),
            "accuracy": float(np.mean(right)), **_quality(cal, y, binary),
            "raw": raw, "curve": _curve(top, right)}  # fmt: skip


def _scored(rs: list[dict], e: dict[str, Any]) -> dict[str, Any]:
    """What the fitted entry gives on rows it was not fitted on: ECE and Brier of the calibrated
    probabilities, and the answers kept at its τ (count, coverage, selective accuracy with its interval)."""
    P, y = _arrays(rs)
    cal = scale(P, e["temperature"])
    top, right = cal.max(1), cal.argmax(1) == y
    kept = top >= e["abstain_below"]
    k, hits = int(kept.sum()), int((kept & right).sum())
    return {"n": len(rs), "accuracy": float(right.mean()), **_quality(cal, y, e["type"] == "noul"),
            "raw": _quality(P, y, e["type"] == "noul"), "kept": k, "coverage": k / len(rs),
            "selective_accuracy": hits / k if k else None, "ci95": list(wilson(hits, k)) if k else None}  # fmt: skip


def _ranked(top, right):
    """The confidences most confident first, and the right answers among the first k (k = 1 … n)."""
    import numpy as np

    order = np.argsort(-top, kind="stable")
    return top[order], np.cumsum(right[order])


def _threshold(top, right, precision: float | None, coverage: float | None, min_kept: int) -> dict[str, Any]:
    """τ and what it gives on the fit rows. Only cuts between distinct p values count (ties stay together).
    A cut meets the target only with ≥ min_kept kept answers (precision: and its Wilson lower bound ≥ P)."""
    p, hits = _ranked(top, right)
    n = len(p)
    cuts = [k for k in range(1, n + 1) if k == n or p[k] < p[k - 1]]  # keep the first k answers
    lower = {k: wilson(int(hits[k - 1]), k)[0] for k in cuts if k >= min_kept}
    if precision is not None:
        ok = [k for k, lo in lower.items() if lo >= precision - 1e-12]
        k = max(ok) if ok else None
    else:
        k = next(k for k in cuts if k >= math.ceil(cast(float, coverage) * n - 1e-9))  # the other target
        k = k if k >= min_kept else None
    if k is None:  # the target cannot be promised: abstain on everything (routing all of it is the safe side)
        return {"abstain_below": 1.0, "kept": 0, "coverage": 0.0, "selective_accuracy": None, "ci95": None,
                "target_met": False, "note": _missed(n, lower, precision, min_kept)}  # fmt: skip
    tau = 0.0 if k == n else float(p[k - 1])
    return {
        "abstain_below": tau,
        "kept": k,
        "coverage": k / n,
        "selective_accuracy": float(hits[k - 1] / k),
        "ci95": list(wilson(int(hits[k - 1]), k)),
        "target_met": True,
    }


def _missed(n: int, lower: dict[int, float], precision: float | None, min_kept: int) -> str:
    """What a missed target means, and what would be met: the file's `note` and the printed line."""
    out = "target not met: every row of this question will abstain (abstain_below 1)"
    if n < min_kept or not lower:
        return out + f"; {n} labelled answers, fewer than --min-kept {min_kept}: label more rows"
    best = math.floor(max(lower.values()) * 100) / 100
    if precision is None:  # a coverage target keeps too few answers
        return out + f"; it keeps fewer than --min-kept {min_kept} answers: a higher --target-coverage"
    if best <= 0:
        return out + f"; no {min_kept} most confident answers are reliably right: no precision can be promised"
    return out + (f"; the most this data supports is --target-precision {best:.2f} (95 % Wilson lower bound, "
                  f"≥ {min_kept} kept answers)")  # fmt: skip


def _curve(top, right) -> list[dict[str, float]]:
    p, hits = _ranked(top, right)
    n, out = len(p), []
    for i in range(1, CURVE_POINTS + 1):
        k = max(1, math.ceil(i / CURVE_POINTS * n - 1e-9))
        out.append({"coverage": k / n, "accuracy": float(hits[k - 1] / k), "threshold": float(p[k - 1])})
    return out


def _kept(e: dict) -> str:
    """`kept 120/300 (40%), selective accuracy 91.7% (95% CI 85.4–95.4%)`."""
    n = e["n"]
    out = f"kept {e['kept']}/{n} ({e['kept'] / n:.0%})"
    if e.get("selective_accuracy") is not None:
        lo, hi = e["ci95"]
        out += f", selective accuracy {e['selective_accuracy']:.1%} (95% CI {lo:.1%}–{hi:.1%})"
    return out


def curve_table(doc: dict) -> str:
    """The selective-accuracy/coverage curve of each question, as text for the terminal."""
    lines = []
    target = doc["target"]
    want = (f"precision {target['precision']:g}" if "precision" in target
            else f"coverage {target['coverage']:g}") + f" on ≥ {target.get('min_kept', MIN_KEPT)} kept answers"  # fmt: skip
    for qid, e in doc["questions"].items():
        if e["type"] == "multi":
            lines += multi_lines(qid, e)
            continue
        lines.append(f"{qid}: n={e['n']}, T={e['temperature']:.3f}, accuracy {e['accuracy']:.1%}; ECE "
                     f"{e['ece']:.3f}, Brier {e['brier']:.3f} (uncalibrated: ECE {e['raw']['ece']:.3f}, "
                     f"Brier {e['raw']['brier']:.3f})")  # fmt: skip
        if e["target_met"]:
            lines.append(f"  target {want} met: abstain below {e['abstain_below']:.3f}: {_kept(e)}")
        else:
            lines.append(f"  target {want}: {e['note']}")
        if (h := e.get("holdout")) is not None:
            lines.append(f"  held out ({h['n']} rows, not fitted on): accuracy {h['accuracy']:.1%}; ECE "
                         f"{h['ece']:.3f}, Brier {h['brier']:.3f} (uncalibrated: ECE {h['raw']['ece']:.3f}, "
                         f"Brier {h['raw']['brier']:.3f}); {_kept(h)}")  # fmt: skip
        if e["temperature"] >= T_MAX * 0.999:  # the fit's upper end: flattening still lowered the NLL
            lines.append(f"  T at the fit's upper bound ({T_MAX:g}): these probabilities carry no usable signal "
                         "for this question (or point the wrong way)")  # fmt: skip
        lines.append("  coverage  " + " ".join(f"{c['coverage']:>5.0%}" for c in e["curve"]))
        lines.append("  accuracy  " + " ".join(f"{c['accuracy']:>5.0%}" for c in e["curve"]))
    return "\n".join(lines) + "\n"


def missed(doc: dict) -> list[str]:
    """The questions whose target was missed: every row of them will abstain (`calibrate` warns)."""
    return [q for q, e in doc["questions"].items() if not e["target_met"]]
