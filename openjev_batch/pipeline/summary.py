"""What a job reports: its Summary, the running totals it is built from (chunk by chunk, resumed parts too),
the count check, the most frequent errors and the answer distribution."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import OutputCheckError
from ..readouts.base import Readout


@dataclass(frozen=True)
class Summary:
    """Counts for one job. `questions` counts output records (one per row × question; classify: one per
    row). Tokens: logical = Σ branch lengths (what a no-reuse run computes); prefix_tokens = the prefix part
    of it (Σ over answered branches of their row's prefix length, so a row's prefix counts once per
    question); computed = Σ (branch − cached) + prefix warm-up passes; unique_tokens = what the planner
    counted for the answered branches of the chunks run now (a radix tree over each window holds).

    `answers` (the end-of-run answer distribution; `Classifier.last_summary.answers`): a dict from question
    id, in first-seen order, to a tuple with one `(option, rows, mean_confidence)` per option of the question,
    in the question's option order: `rows` is how many rows got that option as their answer, and
    `mean_confidence` their mean `confidence`, None when no row got it. For a `multi` question (its id in
    `multi`) each entry is `(label, rows that chose it, their mean P(yes) of it)`. classify has one question,
    `label`, whose options are the classifier's labels. E.g. `{"urgency": (("low", 2, 0.81), ("high", 1,
    0.64), ("critical", 0, None))}`. `answered_rows[q]` is the rows answered for `q` (the denominator of a
    share) and `abstained[q]`, for a calibrated question, the rows per option that abstained, aligned with
    `answers[q]`."""

    rows: int
    questions: int
    answered: int
    errors: int
    prefix_tokens: int
    branch_tokens: int
    cached_tokens: int
    warm_tokens: int
    wall_s: float
    output: str
    unique_tokens: int = 0
    model: str = ""  # model_info.describe(): architecture, hybrid/recurrent layers, MoE
    # the backend that ran the job and its device ("NAME on cpu"): without `-b` the default is chosen for the
    # machine, and only the output's manifest said which (new-user trial)
    backend: str = ""
    tokenizer: str = ""  # the class that tokenized (backends/tokenizer.tokenizer_name)
    pattern: str = ""  # the request pattern the backend chose for it
    startup: str = (
        ""  # the backend's start-up (engine start, kernel warm-up), part of wall_s when it ran here
    )
    # the most frequent distinct errors: (count, error without its row name, one row it came from)
    top_errors: tuple[tuple[int, str, str], ...] = ()
    # per question id, in first-seen order: ((option, rows answered with it, their mean confidence or None
    # when no row chose it), …), the question's options in their order (classify: one question, "label");
    # a multi question's: (label, rows that chose it, their mean P(yes) of it)
    answers: dict[str, tuple[tuple[str, int, float | None], ...]] = field(default_factory=dict)
    # per question of `answers`: the rows answered (a multi row that chose no label too)
    answered_rows: dict[str, int] = field(default_factory=dict)
    # per calibrated question of `answers` (rows with an `abstain` value): the rows that abstained, per option
    # aligned with `answers[question]` (issue 42.1: 300 of 300 abstentions were invisible)
    abstained: dict[str, tuple[int, ...]] = field(default_factory=dict)
    multi: tuple[str, ...] = ()  # the questions of `answers` that are `type: multi` (labels chosen per row)
    resumed_chunks: tuple[int, ...] = ()  # input chunks taken from OUT.partial (--resume); counted above
    # rows copied from earlier outputs (--reuse; pipeline/reuse.py; None: none given): counted above, their
    # tokens not; the notes say which earlier output gave nothing, and why
    reused_rows: int | None = None
    reuse_notes: tuple[str, ...] = ()
    # what a runner that scores nothing counted instead (runners/plan_only.PlanCounts: --dry-run, --show-prompt;
    # runners/parse_only.RowChecks: validate), from its describe()
    counted: Any = None

    @property
    def computed_tokens(self) -> int:
        return self.branch_tokens - self.cached_tokens + self.warm_tokens

    @property
    def cache_hit_rate(self) -> float:
        """1 − computed/logical: the share of logical tokens the job did not have to compute."""
        return 1 - self.computed_tokens / self.branch_tokens if self.branch_tokens else 0.0

    @property
    def logical_tokens(self) -> int:
        return self.branch_tokens

    @property
    def shared_rate(self) -> float:
        """1 − unique/logical: the share of logical tokens the plan shares between rows."""
        return 1 - self.unique_tokens / self.branch_tokens if self.branch_tokens else 0.0


# a calibrated question abstaining on more than this share of its answered rows is warned of
ABSTAIN_WARN = 0.5


def abstain_warnings(s: Summary, readout: Any) -> list[str]:
    """One line per calibrated question that abstained on more than half its answered rows: a missed calibration
    target writes a threshold of 1, and the run abstains on every row (issue 42.1). The CLI prints each as a
    `warning:` line; the Python API (`Classifier.run`) gives each to `warnings.warn`."""
    cal = getattr(readout, "calibration", None)
    out = []
    for qid, per_option in s.abstained.items():
        n, of = sum(per_option), s.answered_rows.get(qid, 0)
        if not of or n / of <= ABSTAIN_WARN:
            continue
        entry = cal.entries.get(qid) if cal is not None else None
        why = ""
        if entry is not None:
            why = f", abstain_below {entry.abstain_below:.3f}" + (
                ": its calibration target was not met (see `calibrate`'s note), refit with a lower target"
                if entry.abstain_below >= 1.0 else ""
            )  # fmt: skip
        where = f"the calibration file {cal.path}" if cal is not None else "the calibration file"
        out.append(f"question {qid!r} abstained on {n:,} of {of:,} answered rows ({n / of:.0%}) under {where}{why}")
    if cal is not None and s.answered_rows and not s.abstained:  # a file fitted on other questions, `unfitted: raw`
        out.append(f"the calibration file {cal.path} has no entry for any of the {len(s.answered_rows)} questions "
                   "answered: every answer is uncalibrated, as its `unfitted: raw` allows")  # fmt: skip
    return out


TOP_ERRORS = 5


def top_errors(stats: pa.Table, n: int = TOP_ERRORS) -> tuple[tuple[int, str, str], ...]:
    """The `n` most frequent distinct errors in an output's `id` and `error` columns, most frequent first
    (ties: first seen first). Every error starts with its row's name (`row T7: …`, or `row at index 4: …`
    for a row without a usable id); that name is taken off, so the same fault on many rows counts as one
    error. Numbers inside the rest (token counts) are kept: `branch has 40,210 tokens` and `… 41,003 …`
    are two errors, each with its exact text."""
    errs = stats.filter(pc.invert(pc.is_null(stats.column("error"))))
    counts: dict[str, list] = {}
    ids = errs.column("id").to_pylist() if "id" in errs.column_names else [None] * errs.num_rows
    for rid, e in zip(ids, errs.column("error").to_pylist(), strict=True):
        name = f"row {rid}: " if rid is not None else None
        if name is None or not e.startswith(name):
            m = re.match(r"row at index [0-9]+: ", e)
            name = m.group(0) if m else ""
        c = counts.setdefault(e[len(name) :], [0, name.removesuffix(": ")])
        c[0] += 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1][0])[:n]  # stable: ties keep first-seen order
    return tuple((c, msg, where) for msg, (c, where) in ranked)


SEP = "\x1f"  # joins a question's id, type and options into one key (a name holding one is shown split)


class AnswerCounts:
    """Per question: how many rows got each option, the sum of their confidences and how many of them
    abstained, and the rows answered, added part by part (memory: one counter per question × option,
    whatever the job's size)."""

    def __init__(self) -> None:
        self.options: dict[str, list[str]] = {}
        # (question, option) → [rows, Σ confidence, abstained, rows with an abstain value]
        self.counts: dict[tuple[str, str], list] = {}
        self.rows: dict[str, int] = {}  # question → rows answered (a multi row choosing no label too)

    def add(self, readout: Readout, part: pa.Table) -> None:
        view = readout.answers(part) if part.num_rows else None
        if view is None:
            return
        answered, options = view
        for q, opts in options.items():
            self.options.setdefault(q, opts)
        n = answered.num_rows
        # optional columns (Readout.answers): `abstain` (calibrated runs), `row` (1 where the entry counts its
        # row: a multi row has one entry per chosen label, or one with a null answer when it chose none)
        if "abstain" not in answered.column_names:
            answered = answered.append_column("abstain", pa.nulls(n, pa.bool_()))
        if "row" not in answered.column_names:
            answered = answered.append_column("row", pa.array([1] * n, pa.int64()))
        answered = answered.append_column("abstained", pc.cast(answered.column("abstain"), pa.int64()))
        agg = answered.group_by(["question", "answer"]).aggregate(
            [("confidence", "sum"), ("answer", "count"), ("abstained", "sum"), ("abstain", "count"),
             ("row", "sum")]
        )  # fmt: skip
        cols = ("question", "answer", "confidence_sum", "answer_count", "abstained_sum", "abstain_count", "row_sum")
        for q, a, conf, k, ab, seen, rows in zip(*(agg.column(c).to_pylist() for c in cols), strict=True):
            self.options.setdefault(q, [])
            self.rows[q] = self.rows.get(q, 0) + int(rows or 0)
            if a is None:  # a multi row that chose no label: counted in its question's rows only
                continue
            c = self.counts.setdefault((q, a), [0, 0.0, 0, 0])
            c[0] += k
            c[1] += conf or 0.0
            c[2] += int(ab or 0)
            c[3] += seen

    def _names(self) -> dict[str, str]:
        """Each key's name: `id SEP type SEP options…` (label logprobs) is shown as the id, or, where rows
        asked different questions under that id, as `id (type: options)`."""
        variants: dict[str, int] = {}
        for q in self.options:
            variants[q.split(SEP)[0]] = variants.get(q.split(SEP)[0], 0) + 1
        out = {}
        for q in self.options:
            qid, *rest = q.split(SEP)
            out[q] = qid if variants[qid] == 1 or not rest else f"{qid} ({rest[0]}: {', '.join(rest[1:])})"
        return out

    def _order(self, q: str) -> list[str]:
        opts = self.options[q]
        return [*opts, *(a for (qq, a) in self.counts if qq == q and a not in opts)]

    def distribution(self) -> dict[str, tuple[tuple[str, int, float | None], ...]]:
        """Per question every option in its order (then any answer outside them), rows and mean confidence."""
        out = {}
        for q, name in self._names().items():
            rows = []
            for o in self._order(q):
                n, conf, *_ = self.counts.get((q, o), (0, 0.0))
                rows.append((o, int(n), conf / n if n else None))
            out[name] = tuple(rows)
        return out

    def answered_rows(self) -> dict[str, int]:
        return {name: self.rows.get(q, 0) for q, name in self._names().items()}

    def abstained(self) -> dict[str, tuple[int, ...]]:
        """Per question whose rows carry an `abstain` value: the abstentions per option (distribution's order)."""
        out = {}
        for q, name in self._names().items():
            got = [self.counts.get((q, o), (0, 0.0, 0, 0)) for o in self._order(q)]
            if any(c[3] for c in got):
                out[name] = tuple(int(c[2]) for c in got)
        return out

    def multi(self) -> tuple[str, ...]:
        return tuple(name for q, name in self._names().items() if q.split(SEP)[1:2] == ["multi"])


@dataclass
class Totals:
    """Running counts of a job's output, chunk by chunk (from each finished part, resumed ones too)."""

    rows: int = 0
    expected: int = 0
    records: int = 0
    errors: int = 0
    prefix: int = 0
    branch: int = 0
    cached: int = 0
    unique: int = 0
    warm: int = 0  # warm-up tokens of the parts that kept them in their metadata (store.part_info)
    failed: list = field(default_factory=list)  # the (id, error) rows of the parts, for top_errors
    answers: AnswerCounts = field(default_factory=AnswerCounts)
    resumed: list = field(default_factory=list)  # chunks taken from an earlier run (--resume)
    reused: int = 0  # rows copied from earlier outputs (--reuse)

    def add(self, readout: Readout, part: pa.Table, info: dict[str, int] | None = None) -> None:
        """Count one finished part; `info`: its metadata numbers (warm-up and planned unique tokens, the rows
        copied from earlier outputs and their tokens: this job's work leaves them out)."""
        info = info or {}
        self.warm += info.get("warm_tokens", 0)
        self.unique += info.get("unique_tokens", 0)
        self.reused += info.get("reused_rows", 0)
        self.answers.add(readout, part)
        bad = part.filter(pc.invert(pc.is_null(part.column("error"))))
        if bad.num_rows:
            self.failed.append(bad.select(["id", "error"]))
        self.records += part.num_rows
        self.errors += part.num_rows - int(pc.sum(pc.is_null(part.column("error"))).as_py() or 0)
        t = readout.tokens(part)
        for k in ("prefix", "branch", "cached"):
            setattr(self, k, getattr(self, k) + t[k] - info.get(f"reused_{k}", 0))

    def check(self, output: Path | None, fix: str) -> None:
        """Raises OutputCheckError unless the output holds exactly the records the input needs (an input
        without rows is the source's to refuse: a file is, an empty DataFrame gives an empty table)."""
        if self.records != self.expected:
            raise OutputCheckError(
                f"count check failed: {self.rows} input rows need {self.expected} output rows, "
                f"the partial output has {self.records}; {fix}"
            )

    def summary(
        self, warm: int, wall_s: float, output: str, cls: type[Summary] = Summary, **extra: Any
    ) -> Summary:
        """The job's Summary; `cls` and `extra`: a runner's own (runners/ray: RaySummary, its actors)."""
        return cls(
            rows=self.rows, questions=self.records, answered=self.records - self.errors, errors=self.errors,
            prefix_tokens=self.prefix, branch_tokens=self.branch, cached_tokens=self.cached,
            warm_tokens=warm, wall_s=wall_s, output=output, unique_tokens=self.unique,
            top_errors=top_errors(pa.concat_tables(self.failed)) if self.failed else (),
            answers=self.answers.distribution(), answered_rows=self.answers.answered_rows(),
            abstained=self.answers.abstained(), multi=self.answers.multi(), resumed_chunks=tuple(self.resumed),
            **extra,
        )  # fmt: skip


def describe_model(info) -> str:
    return info.describe() if info.known else ""
