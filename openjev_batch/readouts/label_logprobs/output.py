"""The `label-logprobs` readout's output: its columns (`OUTPUT_SCHEMA`; with --calibration
`CALIBRATED_SCHEMA`), a row's records (one per question: its answer and tokens, or its error; calibrated
with --calibration, calibration.py), and what a summary reads back from the written records: their tokens,
their answers (`summary.AnswerCounts`) and the summary table's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from ..base import RowFailures, RowResults
from .calibration import Calibration, apply
from .items import chosen_labels, combine, items
from .questions import QuestionSpec
from .rows import Row

SEP = "\x1f"  # as pipeline.summary.SEP: a question's id, type and options joined into one answer key

OUTPUT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question_id", pa.string()),
        ("type", pa.string()),
        ("options", pa.list_(pa.string())),
        ("probs", pa.list_(pa.float64())),
        ("answer", pa.string()),
        ("p_true", pa.float64()),
        ("score", pa.float64()),
        ("confidence", pa.float64()),
        ("label_mass", pa.float64()),
        ("prefix_tokens", pa.int64()),
        ("branch_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("error", pa.string()),
        ("chosen", pa.list_(pa.string())),  # multi: the labels at or above the threshold
        ("order_spread", pa.float64()),  # order-debiased: the largest change of an option's p across orders
    ]
)


# with --calibration: the distribution before it, and whether the answer falls below the abstain threshold
CALIBRATED_SCHEMA = pa.schema(
    [*OUTPUT_SCHEMA, ("raw_probs", pa.list_(pa.float64())), ("abstain", pa.bool_())]
)

# one output record: (row, question id, type, **its values) → the record with every other column null
Record = Callable[..., dict[str, Any]]


def question_records(
    row: Row, results: RowResults, failed: RowFailures, calibration: Calibration | None, rec: Record
) -> list[dict[str, Any]]:
    """The records of one answered row, one per question in its order: a question whose branches failed or
    whose answer cannot be read has its error; a question asked as several branches (multi, debias) counts
    all of their tokens."""
    out = []
    for q in row.questions:
        its = items(q) if isinstance(q, QuestionSpec) else ()
        why = failed.get(q.qid) or next((failed[it.bid] for it in its if it.bid in failed), None)
        if why is not None:
            opts = list(q.options) if isinstance(q, QuestionSpec) else None
            out.append(rec(row, q.qid, q.type, error=why, options=opts))
            continue
        q = cast(QuestionSpec, q)  # a QuestionError is always failed by its id (branches.row_prompt)
        got = [results[it.bid] for it in its]
        tokens = dict(prefix_tokens=got[0][0], branch_tokens=sum(r.prompt_tokens for _, r in got),
                      cached_tokens=sum(r.cached_tokens for _, r in got))  # fmt: skip
        extra: dict[str, Any] = {}
        try:
            if err := next((r.error for _, r in got if r.error), None):
                raise ValueError(err)
            c = combine(q, [r.values for _, r in got])
            a, extra = c.answer, {"chosen": c.chosen, "order_spread": c.order_spread}
            if calibration is not None:
                a, cal = calibrated(calibration, q, a)
                extra.update(cal)
        except ValueError as e:
            err = f"row {row.id}: questions.{q.qid}: {e}"
            out.append(rec(row, q.qid, q.type, options=list(q.options), error=err, **tokens))
            continue
        out.append(
            rec(
                row, q.qid, q.type, options=list(a.options), probs=list(a.probs), answer=a.answer,
                p_true=a.p_true, score=a.score, confidence=a.confidence, label_mass=a.label_mass, **tokens,
                **extra,
            )
        )  # fmt: skip
    return out


def calibrated(calibration: Calibration, q: QuestionSpec, a):
    """The calibrated answer and its extra columns; raises ValueError (the question's error) when the file
    has no entry for it (and does not let it go unfitted) or was fitted on other options."""
    entry = calibration.entry(q.qid, q.type, q.options)
    if entry is None:  # "unfitted": "raw"
        return a, {"raw_probs": list(a.probs)}
    if q.type == "multi":  # per-label P(yes): the file sets the threshold the labels are chosen at
        return a, {"chosen": [o for o, p in zip(a.options, a.probs, strict=True) if p >= entry.threshold]}
    cal, abstain = apply(entry, a)
    return cal, {"raw_probs": list(a.probs), "abstain": abstain}


def token_totals(table: pa.Table) -> dict[str, int]:
    """The prefix, branch and cached tokens of a table's answered records."""
    ok = table.filter(pc.is_null(table.column("error")))
    return {
        k: int(pc.sum(ok.column(c)).as_py() or 0)
        for k, c in (
            ("prefix", "prefix_tokens"),
            ("branch", "branch_tokens"),
            ("cached", "cached_tokens"),
        )
    }


def answer_table(table: pa.Table) -> tuple[pa.Table, dict[str, list[str]]]:
    """A table's answers, one line per answer (and per chosen label of a multi question), each keyed by its
    question, with the options of each key."""
    # rows may ask different questions under one id (per-row `questions`): the key is the id, type
    # and options, so a noul `q` and a choice `q` are counted apart (summary.AnswerCounts names them)
    opts = pc.binary_join(table.column("options"), SEP)
    key = pc.binary_join_element_wise(table.column("question_id"), table.column("type"), opts, SEP)
    options: dict[str, list[str]] = {}
    for k in pc.unique(key).drop_null().to_pylist():
        options[k] = k.split(SEP)[2:]
    keep = pc.is_valid(table.column("answer"))
    ok = table.filter(keep)
    # a calibrated answer below its threshold abstains (null: the file let the question go unfitted)
    abstain = ok.column("abstain") if "abstain" in ok.column_names else pa.nulls(ok.num_rows, pa.bool_())
    single = pa.table([key.filter(keep), ok.column("answer"), ok.column("confidence"), abstain,
                       pa.array([1] * ok.num_rows, pa.int64())],
                      names=["question", "answer", "confidence", "abstain", "row"])  # fmt: skip
    return pa.concat_tables([single, chosen_labels(table, key)]), options


def summary_rows(s, calibration: Calibration | None) -> list[tuple[str, str]]:
    """The summary table of a run (`s`: pipeline.summary.Summary), its abstentions and calibration file named."""
    cal = calibration
    return [
        ("rows", f"{s.rows:,}"),
        ("questions", f"{s.questions:,}"),
        ("answered", f"{s.answered:,}"),
        # answered, but below the calibrated threshold: for a person to route (issue 42.1: a run whose 300
        # rows all abstained said "answered 300 · errors 0" and nothing else)
        *((f"abstained ({q})", _share(sum(n), s.answered_rows[q]) + _entry(cal, q)) for q, n in s.abstained.items()),
        ("errors", f"{s.errors:,}"),
        *([("calibration", f"{cal.path} (sha256 {cal.sha256[:16]})" + _raw(s))] if cal is not None else []),
        ("branch (logical) tokens", f"{s.branch_tokens:,}"),
        ("  of which prefix", f"{s.prefix_tokens:,}"),
        ("computed tokens", f"{s.computed_tokens:,}"),
        ("cache hit rate", f"{s.cache_hit_rate:.1%}"),
        ("wall time", f"{s.wall_s:.1f} s"),
        ("output", s.output),
    ]


def _entry(cal: Calibration | None, qid: str) -> str:
    """What a question abstained under: its threshold and temperature (issue 48.14: said only in the warning
    when more than half abstained)."""
    e = cal.entries.get(qid) if cal is not None else None
    if e is None:
        return ""
    if e.type == "multi":
        return f" (labels chosen at P(yes) ≥ {e.threshold:.3f})"
    return f" (top calibrated probability below {e.abstain_below:.3f}, T = {e.temperature:.3f})"


def _raw(s) -> str:
    """The summary's note of the questions a calibrated run answered uncalibrated (no entry in a file of
    `unfitted: raw`: no `abstain` value); '' when every question had its entry."""
    raw = [q for q in s.answered_rows if q not in s.abstained]
    if not raw:
        return ""
    names = ", ".join(raw[:5]) + (f", … {len(raw) - 5} more" if len(raw) > 5 else "")
    return f"; uncalibrated (no entry): {names}"


def _share(n: int, of: int) -> str:
    return f"{n:,} ({n / of:.1%})" if of else f"{n:,}"
