"""`calibrate` for `type: multi` questions (issue 32.3: "a calibration file may set" the threshold): per
question id, the P(yes) threshold its labels are chosen at, fitted on labelled rows whose gold is the set of
labels that apply.

A multi answer has no single top probability to scale or abstain on, so no temperature is fitted: the entry
is the one readouts/label_logprobs/calibration.py reads, ``{"type": "multi", "options": [...],
"threshold": t}``, with what t gives on the fit rows. Every (row, label) pair is one decision, most
confident first; t is the lowest P(yes) kept at a cut between distinct values (ties stay together):
- `--target-precision P`: the most labels chosen whose precision (chosen labels that are gold) has a 95 %
  Wilson lower bound ≥ P, on at least `min_kept` chosen labels (as calibration_fit's choice questions);
  none reaches it: t = 1 (only a certain label is chosen), `target_met` false and a `note`;
- `--target-coverage C`: the fewest labels chosen that recover ≥ C of the gold labels (recall, the multi
  reading of "the share of answers kept"), met only with at least `min_kept` chosen labels.

A gold value is a list of label names (any case) or indices, a JSON list of them, or names separated by
commas; ``[]`` is a labelled row where no label applies.
"""

from __future__ import annotations

import json
import math
from typing import Any, cast

import numpy as np

from ..errors import ConfigError
from .metrics import reliability, wilson

GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # the curve: what each threshold would give


def gold_labels(g: Any, options: list[str], rid: Any) -> frozenset[int]:
    """The indices of the gold labels of one row. Raises ConfigError naming the row."""
    if isinstance(g, str):  # a CSV output holds a kept list as JSON text
        s = g.strip()
        try:
            g = json.loads(s) if s.startswith("[") else [x.strip() for x in s.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(f"calibrate: row {rid}: gold {s!r:.80} is not a JSON list of labels") from None
    if not isinstance(g, list | tuple):
        raise ConfigError(f"calibrate: row {rid}: a multi question's gold is a list of labels, got {g!r:.80}")
    low, out = [o.lower() for o in options], set()
    for x in g:
        if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < len(options):
            out.add(x)
        elif isinstance(x, str) and x.strip().lower() in low:
            out.add(low.index(x.strip().lower()))
        else:
            raise ConfigError(
                f"calibrate: row {rid}: gold label {x!r:.80} is not one of {', '.join(options)} or its index"
            )
    return frozenset(out)


def p_yes(probs: list, k: int) -> bool:
    """K finite P(yes) values in [0, 1] (they need not sum to 1)."""
    try:
        p = [float(x) for x in probs]
    except (TypeError, ValueError):
        return False
    return len(p) == k and all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in p)


def fit_multi(
    rs: list[dict[str, Any]], precision: float | None, coverage: float | None, min_kept: int
) -> dict[str, Any]:
    """The entry's fitted part for one multi question's records (probs: P(yes) per label, gold: a set)."""
    p, hit = _decisions(rs)
    n, gold = len(p), int(hit.sum())
    tp = np.cumsum(hit)
    cuts = [k for k in range(1, n + 1) if k == n or p[k] < p[k - 1]]  # choose the first k decisions
    if precision is not None:
        ok = [k for k in cuts if k >= min_kept and wilson(int(tp[k - 1]), k)[0] >= precision - 1e-12]
        k = max(ok) if ok else None
    else:
        k = next((k for k in cuts if gold and tp[k - 1] / gold >= cast(float, coverage) - 1e-9), None)  # the other target
        k = k if k is not None and k >= min_kept else None
    if k is None:
        note = ("target not met: threshold 1 (only a certain label is chosen)"
                + (f"; {n} labelled decisions, fewer than --min-kept {min_kept}: label more rows" if n < min_kept
                   else f"; fewer than --min-kept {min_kept} chosen labels reach it"))  # fmt: skip
        return {"threshold": 1.0, "precision": None, "recall": None, "kept": 0, "ci95": None,
                "target_met": False, "note": note, **_summary(rs, p, hit, gold)}  # fmt: skip
    return {"threshold": float(p[k - 1]), "precision": float(tp[k - 1] / k),
            "recall": float(tp[k - 1] / gold) if gold else None, "kept": k,
            "ci95": list(wilson(int(tp[k - 1]), k)), "target_met": True,
            **_summary(rs, p, hit, gold)}  # fmt: skip


def _decisions(rs: list[dict[str, Any]]):
    """Every (row, label) P(yes) and whether the label is gold, most confident first."""
    p = np.array([x for r in rs for x in r["probs"]], dtype=float)
    hit = np.array([k in r["gold"] for r in rs for k in range(len(r["probs"]))])
    order = np.argsort(-p, kind="stable")
    return p[order], hit[order]


def holdout_multi(rs: list[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """What the fitted threshold gives on rows it was not fitted on: precision and recall of the labels it
    chooses, and the ECE and Brier of P(yes) as a probability that the label applies."""
    p, hit = _decisions(rs)
    chosen = p >= threshold
    c, right, gold = int(chosen.sum()), int((chosen & hit).sum()), int(hit.sum())
    return {"n": len(rs), "decisions": len(p), "kept": c, "precision": right / c if c else None,
            "ci95": list(wilson(right, c)) if c else None, "recall": right / gold if gold else None,
            "ece": reliability(p, hit.astype(float))[0], "brier": float(np.mean((p - hit) ** 2))}  # fmt: skip


def _summary(rs: list[dict], p, hit, gold: int) -> dict[str, Any]:
    curve = []
    for t in GRID:
        chosen = p >= t
        c, right = int(chosen.sum()), int((chosen & hit).sum())
        curve.append({"threshold": t, "precision": right / c if c else None,
                      "recall": right / gold if gold else None})  # fmt: skip
    return {"n": len(rs), "gold_labels": gold, "curve": curve}


def multi_lines(qid: str, e: dict) -> list[str]:
    """The terminal lines of one multi entry (calibration_fit.curve_table)."""
    pct = lambda x: "  –  " if x is None else f"{x:>5.0%}"  # noqa: E731
    if e["target_met"]:
        met = f"choose at P(yes) ≥ {e['threshold']:.3f}: {e['kept']} labels chosen, precision {e['precision']:.1%}"
        if e.get("ci95"):
            met += f" (95% CI {e['ci95'][0]:.1%}–{e['ci95'][1]:.1%})"
        met += "" if e["recall"] is None else f", recall {e['recall']:.1%}"
    else:
        met = e.get("note") or "target not reached: threshold 1 (only a certain label is chosen)"
    out = [f"{qid}: multi, n={e['n']} rows, {e['gold_labels']} gold labels; {met}"]
    if (h := e.get("holdout")) is not None:
        prec = "–" if h["precision"] is None else f"{h['precision']:.1%}"
        rec = "–" if h["recall"] is None else f"{h['recall']:.1%}"
        out.append(f"  held out ({h['n']} rows, not fitted on): {h['kept']} labels chosen, precision {prec}, "
                   f"recall {rec}; P(yes) ECE {h['ece']:.3f}, Brier {h['brier']:.3f}")  # fmt: skip
    return [
        *out,
        "  threshold " + " ".join(f"{c['threshold']:>5.1f}" for c in e["curve"]),
        "  precision " + " ".join(pct(c["precision"]) for c in e["curve"]),
        "  recall    " + " ".join(pct(c["recall"]) for c in e["curve"]),
    ]
