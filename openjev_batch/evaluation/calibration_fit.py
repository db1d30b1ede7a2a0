"""`calibrate`: fit a calibration file (readouts/label_logprobs/calibration.py has its format) on a labelled `run` output (a kept gold
column) or an `eval` folder (its predictions.parquet and kept `gold`).

Per question id: the temperature minimising NLL (metrics.fit_temperature), then, on the calibrated
top probability p, the abstain threshold τ (abstain when p < τ): the lowest τ whose kept answers reach the
target precision (the most coverage that does), or the τ that keeps the target share of answers. The
selective-accuracy/coverage curve (accuracy of the answers kept at 10 %, 20 %, … 100 % coverage, most
confident first) is written with each entry and printed.

A gold value is an option's name (any case; yes/no/true/false for noul) or its 0-based index (what eval
folders keep). A `type: multi` question gets a P(yes) threshold instead (calibration_multi.py), its gold a
list of the labels that apply.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..readouts.label_logprobs.calibration import CURVE_POINTS, FORMAT, scaled
from ..values import special_file_problem
from .calibration_multi import fit_multi, gold_labels, multi_lines, p_yes
from .metrics import T_MAX, fit_temperature

MIN_ROWS = 2  # per question: a temperature needs answers to fit on


def read_labelled(path: Path, gold: str, questions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The answered records of a labelled output (.parquet, .jsonl, .jsonl.gz, .json, .csv/.tsv) or an eval
    folder, with their gold values; `questions`: only those question ids (the gold column is theirs), else
    every one. Raises ConfigError."""
    import pyarrow as pa

    path = Path(path)
    if path.is_dir():
        path = path / "predictions.parquet"
    if not path.exists():
        raise ConfigError(f"calibrate: {path}: no such file (a run output, or an eval folder)")
    if problem := special_file_problem(path):  # a FIFO hung waiting for its writer (issue 42)
        raise ConfigError(f"calibrate: {problem}")
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        elif name.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")):
            import pyarrow.json as pj

            rows = pj.read_json(pa.input_stream(path, compression="detect")).to_pylist()
        elif name.endswith(".json"):
            rows = json.loads(path.read_text(encoding="utf-8"))
        elif name.endswith((".csv", ".tsv")):
            import csv

            with path.open(newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f, delimiter="\t" if name.endswith(".tsv") else ","))
        else:
            raise ConfigError(f"calibrate: {path}: unknown extension (a run output or an eval folder)")
    except (OSError, ValueError, RecursionError, pa.ArrowException) as e:
        raise ConfigError(f"calibrate: {path}: cannot read: {str(e)[:200]}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ConfigError(f"calibrate: {path}: not a `run` output (a list of records)")
    if not rows or not {"question_id", "type", "probs", "options"} <= set(rows[0]):
        raise ConfigError(f"calibrate: {path}: not a `run` output (needs question_id, type, options and probs)")
    if gold not in rows[0]:
        raise ConfigError(f"calibrate: {path}: no gold column {gold!r} (keep it with `run --keep {gold}`)")
    if questions:
        asked = {r.get("question_id") for r in rows}
        if missing := [q for q in questions if q not in asked]:
            raise ConfigError(f"calibrate: --question {', '.join(missing)}: not in {path} "
                              f"(its questions: {', '.join(sorted(map(str, asked - {None})))})")  # fmt: skip
        rows = [r for r in rows if r.get("question_id") in questions]
    out = [
        _checked_record(path, r, gold)
        for r in rows
        if not (r.get("error") or r.get("probs") in (None, "") or r.get(gold) in (None, ""))
    ]
    if not out:
        raise ConfigError(f"calibrate: {path}: no answered row with a gold {gold!r}")
    return out


def _checked_record(path: Path, r: dict[str, Any], gold: str) -> dict[str, Any]:
    """`_record`, with a damaged or hand-made row (a cell that is not JSON, a list for a name, a missing
    field) one line naming it instead of a traceback (hostile trial)."""
    try:
        return _record(path, r, gold)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise ConfigError(f"calibrate: {path}: row {str(r.get('id'))[:80]!r}: not a `run` output's record "
                          f"({type(e).__name__}: {str(e)[:120]})") from None  # fmt: skip


def _record(path: Path, r: dict[str, Any], gold: str) -> dict[str, Any]:
    """One answered, labelled row as a fit record. Raises ConfigError naming the row."""
    if not (isinstance(r["question_id"], str) and isinstance(r["type"], str)):
        raise TypeError("question_id and type must be text")
    # a calibrated output is refitted on its raw distribution (a multi row's probs are never scaled)
    probs, options = (_listed(r.get("raw_probs") or r["probs"]), _listed(r["options"]))
    where = f"calibrate: {path}: row {r.get('id')!r}, question {r['question_id']!r}: probs {probs!r:.80}"
    if r["type"] == "multi":  # per-label P(yes): a threshold is fitted, not a temperature
        if not p_yes(probs, len(options)):
            raise ConfigError(f"{where} are not one P(yes) per label of its {len(options)}")
    elif not _distribution(probs, len(options)):
        # a hand-made or damaged file: fitting a temperature on it would write a file that looks valid
        raise ConfigError(f"{where} is not a distribution over its {len(options)} options")
    try:
        if r["type"] == "multi":
            g = gold_labels(r[gold], options, r.get("id"))
        else:
            g = _gold_index(r[gold], r["type"], options, r.get("id"))
    except ConfigError as e:  # a gold column kept for one question of several (new-user trial)
        raise ConfigError(f"{e} (question {r['question_id']!r}; a gold column for some questions only: "
                          "--question ID)") from None  # fmt: skip
    qid, options = r["question_id"], tuple(options)
    return {"qid": qid, "type": r["type"], "options": options, "probs": tuple(probs), "gold": g}


def _distribution(probs: list, k: int) -> bool:
    """K finite probabilities in [0, 1] summing to 1 (to float rounding of a written file)."""
    try:
        p = [float(x) for x in probs]
    except (TypeError, ValueError):
        return False
    return len(p) == k and all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in p) and abs(sum(p) - 1.0) < 1e-3


def _listed(v: Any) -> list:
    return json.loads(v) if isinstance(v, str) else list(v)  # CSV outputs hold lists as JSON text


def _gold_index(g: Any, qtype: str, options: list[str], rid: Any) -> int:
    if isinstance(g, bool) and qtype == "noul":
        return 0 if g else 1
    if isinstance(g, int) and not isinstance(g, bool) and 0 <= g < len(options):
        return g
    s = str(g).strip().lower()
    if qtype == "noul" and s in ("yes", "no"):
        return 0 if s == "yes" else 1
    low = [o.lower() for o in options]
    if s in low:
        return low.index(s)
    if s.isdigit() and int(s) < len(options):
        return int(s)
    raise ConfigError(
        f"calibrate: row {rid}: gold {g!r} is not an option ({', '.join(options)}) or its index"
    )


def fit(records: list[dict[str, Any]], precision: float | None = None, coverage: float | None = None) -> dict:
    """The calibration document (calibration.py) of the labelled records. Raises ConfigError."""
    import numpy as np

    if (precision is None) == (coverage is None):
        raise ConfigError("calibrate: give one of --target-precision and --target-coverage")
    by_q: dict[str, list[dict]] = {}
    for r in records:
        by_q.setdefault(r["qid"], []).append(r)
    questions = {}
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
        if len(rs) < MIN_ROWS:
            raise ConfigError(
                f"calibrate: question {qid!r}: {len(rs)} labelled answer(s), at least {MIN_ROWS}"
            )
        if rs[0]["type"] == "multi":  # a P(yes) threshold for its labels (calibration_multi.py)
            questions[qid] = {"type": "multi", **options, **fit_multi(rs, precision, coverage)}
            continue
        P, y = np.array([r["probs"] for r in rs], dtype=float), np.array([r["gold"] for r in rs])
        t = fit_temperature(P, y)
        cal = [scaled(tuple(p), t) for p in P]
        top = np.array([max(p) for p in cal])
        right = np.array([int(np.argmax(p)) == g for p, g in zip(cal, y, strict=True)])
        questions[qid] = {"type": rs[0]["type"], **options, "temperature": t,
                          **_threshold(top, right, precision, coverage), "n": len(rs),
                          "accuracy": float(right.mean()), "curve": _curve(top, right)}  # fmt: skip
    target = {"precision": precision} if precision is not None else {"coverage": coverage}
    return {"format": FORMAT, "unfitted": "error", "target": target, "questions": questions}


def _ranked(top, right):
    import numpy as np

    order = np.argsort(-top, kind="stable")
    return top[order], np.cumsum(right[order]) / np.arange(1, len(order) + 1)


def _threshold(top, right, precision: float | None, coverage: float | None) -> dict[str, Any]:
    """τ and what it gives on the fit rows. Only cuts between distinct p values count (ties stay together)."""
    p, acc = _ranked(top, right)
    n = len(p)
    cuts = [k for k in range(1, n + 1) if k == n or p[k] < p[k - 1]]  # keep the first k answers
    if precision is not None:
        ok = [k for k in cuts if acc[k - 1] >= precision]
        k = max(ok) if ok else None
    else:
        k = next(k for k in cuts if k >= math.ceil(coverage * n - 1e-9))
    if k is None:  # no cut reaches the precision: abstain on everything (routing all of it is the safe side)
        return {"abstain_below": 1.0, "coverage": 0.0, "selective_accuracy": None, "target_met": False}
    tau = 0.0 if k == n else float(p[k - 1])
    return {
        "abstain_below": tau,
        "coverage": k / n,
        "selective_accuracy": float(acc[k - 1]),
        "target_met": True,
    }


def _curve(top, right) -> list[dict[str, float]]:
    p, acc = _ranked(top, right)
    n, out = len(p), []
    for i in range(1, CURVE_POINTS + 1):
        k = max(1, math.ceil(i / CURVE_POINTS * n - 1e-9))
        out.append({"coverage": k / n, "accuracy": float(acc[k - 1]), "threshold": float(p[k - 1])})
    return out


def curve_table(doc: dict) -> str:
    """The selective-accuracy/coverage curve of each question, as text for the terminal."""
    lines = []
    for qid, e in doc["questions"].items():
        if e["type"] == "multi":
            lines += multi_lines(qid, e)
            continue
        sel = e["selective_accuracy"]
        met = (f"abstain below {e['abstain_below']:.3f}: coverage {e['coverage']:.0%}, selective accuracy "
               f"{sel:.1%}") if e["target_met"] else "target not reached: abstains on every answer"  # fmt: skip
        lines.append(f"{qid}: n={e['n']}, T={e['temperature']:.3f}, accuracy {e['accuracy']:.1%}; {met}")
        if e["temperature"] >= T_MAX * 0.999:  # the fit's upper end: flattening still lowered the NLL
            lines.append(f"  T at the fit's upper bound ({T_MAX:g}): these probabilities carry no usable signal "
                         "for this question (or point the wrong way)")  # fmt: skip
        lines.append("  coverage  " + " ".join(f"{c['coverage']:>5.0%}" for c in e["curve"]))
        lines.append("  accuracy  " + " ".join(f"{c['accuracy']:>5.0%}" for c in e["curve"]))
    return "\n".join(lines) + "\n"
