"""`calibrate`'s input: the answered, labelled records of a `run` output (a kept gold column) or an `eval`
folder (its predictions.parquet and kept `gold`), each a fit record (calibration_fit.py fits them).

A gold value is an option's name (any case; yes/no/true/false for noul) or its 0-based index (what eval
folders keep). On options named by numbers ("1".."4", a score question's levels) a run output's gold is
read as a name, never as an index (issue 42.7: 1 was read as the second option): a number that names no
option is refused, as ambiguous. A `type: multi` question's gold is a list of the labels that apply
(calibration_multi.gold_labels). A damaged or hand-made row is one line naming it, never a traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..values import special_file_problem
from .calibration_multi import gold_labels, p_yes


def read_labelled(path: Path, gold: str, questions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The answered records of a labelled output (.parquet, .jsonl, .jsonl.gz, .json, .csv/.tsv) or an eval
    folder, with their gold values; `questions`: only those question ids (the gold column is theirs), else
    every one. Raises ConfigError."""
    import pyarrow as pa

    path = Path(path)
    folder = path.is_dir()  # an eval folder's `gold` is the option's index (evaluation/build.py)
    if folder:
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
            # line by line, not pyarrow's reader: it types a column from its first rows, so a gold column of
            # names and indices was "Column(/gold) changed from string to number" (issue 48.8)
            with pa.input_stream(path, compression="detect") as f:
                rows = [json.loads(ln) for ln in f.read().decode("utf-8").splitlines() if ln.strip()]
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
        _checked_record(path, r, gold, folder)
        for r in rows
        if not (r.get("error") or r.get("probs") in (None, "") or r.get(gold) in (None, ""))
    ]
    if not out:
        raise ConfigError(f"calibrate: {path}: no answered row with a gold {gold!r}")
    return out


def fitted_debias_order(path: Path) -> int | None:
    """The `--debias-order` of the job that wrote the labelled output `path` (an eval folder: its
    predictions), read from the manifest the output carries (the order is in it when above 1); None when it
    carries none (a hand-made file, or one changed since its job wrote it)."""
    from ..pipeline.output import manifest  # lazy: reads pyarrow

    path = Path(path) / "predictions.parquet" if Path(path).is_dir() else Path(path)
    try:
        doc = manifest.read(path)
    except ConfigError:  # a text output edited since (a gold column added by hand): its job is not known
        return None
    if doc is None:
        return None
    k = doc["manifest"].get("debias_order", 1)
    return k if type(k) is int else None


def _checked_record(path: Path, r: dict[str, Any], gold: str, index_gold: bool = False) -> dict[str, Any]:
    """`_record`, with a damaged or hand-made row (a cell that is not JSON, a list for a name, a missing
    field) one line naming it instead of a traceback (hostile trial)."""
    try:
        return _record(path, r, gold, index_gold)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        why = (f"no {e.args[0]} field" if isinstance(e, KeyError) else f"a cell is not JSON ({e.msg})"
               if isinstance(e, json.JSONDecodeError) else str(e)[:120] if isinstance(e, ValueError) else
               "a value of the wrong kind (options and probs are lists, question_id and type text)")  # fmt: skip
        raise ConfigError(f"calibrate: {path}: row {str(r.get('id'))[:80]!r}: not a `run` output's record "
                          f"({why})") from None  # fmt: skip


def _record(path: Path, r: dict[str, Any], gold: str, index_gold: bool = False) -> dict[str, Any]:
    """One answered, labelled row as a fit record. Raises ConfigError naming the row."""
    if not (isinstance(r["question_id"], str) and isinstance(r["type"], str)):
        raise ValueError("question_id and type must be text")
    # a calibrated output is refitted on its raw distribution (a multi row's probs are never scaled)
    probs, options = (_listed(r.get("raw_probs") or r["probs"]), _listed(r["options"]))
    where = f"calibrate: {path}: row {r.get('id')!r}, question {r['question_id']!r}: probs {probs!r:.80}"
    if r["type"] == "multi":  # per-label P(yes): a threshold is fitted, not a temperature
        if not p_yes(probs, len(options)):
            raise ConfigError(f"{where} are not one P(yes) per label of its {len(options)}")
    elif not _distribution(probs, len(options)):
        # a hand-made or damaged file: fitting a temperature on it would write a file that looks valid
        raise ConfigError(f"{where} is not a distribution over its {len(options)} options")
    g: frozenset[int] | int  # the gold labels of a multi question, else the gold option's index
    try:
        if r["type"] == "multi":
            g = gold_labels(r[gold], options, r.get("id"))
        else:
            g = _gold_index(r[gold], r["type"], options, r.get("id"), index_gold)
    except ConfigError as e:  # a gold column kept for one question of several (new-user trial)
        raise ConfigError(f"{e} (question {r['question_id']!r}; a gold column for some questions only: "
                          "--question ID)") from None  # fmt: skip
    qid = r["question_id"]
    return {"qid": qid, "type": r["type"], "options": tuple(options), "probs": tuple(probs), "gold": g, "id": r.get("id")}


def _distribution(probs: list, k: int) -> bool:
    """K finite probabilities in [0, 1] summing to 1 (to float rounding of a written file)."""
    try:
        p = [float(x) for x in probs]
    except (TypeError, ValueError):
        return False
    return len(p) == k and all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in p) and abs(sum(p) - 1.0) < 1e-3


def _listed(v: Any) -> list:
    return json.loads(v) if isinstance(v, str) else list(v)  # CSV outputs hold lists as JSON text


def _gold_index(g: Any, qtype: str, options: list[str], rid: Any, index_gold: bool = False) -> int:
    """The option index of a gold value. `index_gold`: an int is the option's index (an eval folder's
    `gold`). Otherwise names come first, and on options named by numbers a number is only ever a name."""
    if isinstance(g, float) and g.is_integer():  # an integer column with nulls, as pandas writes it: 1.0
        g = int(g)
    integral = isinstance(g, int) and not isinstance(g, bool)
    if index_gold and integral and 0 <= g < len(options):
        return g
    if isinstance(g, bool) and qtype == "noul":
        return 0 if g else 1
    exact = str(g).strip()
    if exact in options:  # options "X" and "x" are two options (run takes them): case decides first
        return options.index(exact)
    s = exact.lower()
    if qtype == "noul" and s in ("yes", "no"):
        return 0 if s == "yes" else 1
    low = [o.lower() for o in options]
    if low.count(s) > 1:  # a hostile trial's gold "x" of options "X", "x" went to "X", and the fit was wrong
        raise ConfigError(f"calibrate: row {rid}: gold {g!r} matches options {', '.join(o for o in options if o.lower() == s)} "
                          "but none exactly: give the option's name as it is written")  # fmt: skip
    if s in low:
        return low.index(s)
    numbered = [o for o in options if o.strip().lstrip("-").isdigit()]
    if (integral or s.isdigit()) and numbered:
        # options "1".."4": gold 1 is the option "1", and a 0 there is not "the first option" (issue 42.7)
        raise ConfigError(
            f"calibrate: row {rid}: gold {g!r} is ambiguous: options named by numbers ({', '.join(options)}) "
            "read a number as a name, and none is named so (give the option's name)"
        )
    if integral and 0 <= g < len(options):
        return g
    if s.isdigit() and int(s) < len(options):
        return int(s)
    raise ConfigError(
        f"calibrate: row {rid}: gold {g!r} is not an option ({', '.join(options)}) or its index"
    )
