"""The `label-logprobs` readout (`run`): every row asks questions; each question's answer is read from the
next-token logprobs of its option labels (readout.py for the math, prompt.py for the layout).

Output: one record per input row × question, in the row's question order:
`id, question_id, type, options, probs, answer, p_true, score, confidence, label_mass, prefix_tokens,
branch_tokens, cached_tokens, error, chosen, order_spread` (with --calibration also `raw_probs, abstain`), then
the kept columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ...core import RowError, unidentified_row_error
from ...errors import ConfigError
from ...values import read_at_most
from .. import LABEL_LOGPROBS, register
from ..base import Readout, RowFailures, RowResults
from ..image_prompt import check_model_takes_images
from ..rows_images import image_key, input_has_image_column
from .calibration import Calibration, apply, load_calibration
from .items import chosen_labels, combine, items, with_debias
from .leads import lead_problem
from .options import LabelLogprobsOptions
from .prompt import INSTRUCTIONS, Prompter
from .prompt_variants import Variants
from .questions import MAX_QUESTIONS_FILE_BYTES, QuestionError, QuestionSpec, load_questions
from .rows import MAX_BRANCH_TOKENS, Row, ids_and_types, parse_row

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


@register(LABEL_LOGPROBS)
@dataclass(frozen=True)
class LabelLogprobs(Readout):
    """`questions`: the parsed shared `--questions` (None: each row's own `questions` column);
    `questions_sha256`: their file's content hash (the resume key; an edited file never mixes answers);
    `system_prompt`: the system message instead of the default instructions (`--system-prompt`);
    `calibration`: per-question temperatures and abstain thresholds (`--calibration`, calibration.py)."""

    questions: tuple[QuestionSpec, ...] | None = None
    keep: tuple[str, ...] = ()
    questions_sha256: str | None = None
    system_prompt: str | None = None
    image_root: str | None = None  # the input file's folder (relative image paths); None: absolute only
    image_input: bool = False  # the input has an image column: a model that takes no images is refused
    calibration: Calibration | None = None
    # --debias-order: choice/score questions without their own `debias` (items.py); its default is the option's
    debias_order: int = LabelLogprobsOptions.model_fields["debias_order"].default

    backend_kind = "label-logprobs"
    unit = "branches"
    noun = "question"
    command = "run"
    Options = LabelLogprobsOptions
    input_columns = ("id", "state", "questions", "image", "images")
    base_columns = tuple(OUTPUT_SCHEMA.names)
    text_column = "state"  # the Python API takes a Series or a list of strings as this column
    # the host stage of chunk k+1 runs while chunk k is on the engine, so smaller chunks hide more of it
    # (H200, multi-item, W2 12,032 rows: 11.2 s in one chunk, 9.5 s in chunks of 2048; docs/benchmarks.md)
    chunk_rows = 2048

    @classmethod
    def from_config(cls, cfg: Any, labels: Any = None) -> LabelLogprobs:
        """The questions of the options: a file's (read here; raises ConfigError for a missing or bad
        one), parsed ones (the Python API's mapping), or None (each row's own); the calibration of
        `calibration` (`--calibration`; raises ConfigError for a missing or bad file, or shared questions it
        cannot apply to); `debias_order` (shared questions too small for the orders: ConfigError)."""
        opts, keep = cfg.readout_options, tuple(cfg.keep)
        # relative image paths resolve against the input file's folder, and only inside it (images.py)
        root, image_input = None, False
        if getattr(cfg, "input", None) and Path(cfg.input).is_file():
            root, image_input = (
                str(Path(cfg.input).absolute().parent),
                input_has_image_column(Path(cfg.input)),
            )
        if image_input and getattr(
            cfg, "model", None
        ):  # before any weights load: the tokenizer and processor
            check_model_takes_images(cfg.model, getattr(cfg, "trust_remote_code", False))
        calibration = None
        if opts.calibration is not None:
            calibration = load_calibration(opts.calibration)  # raises ConfigError naming the file
        own = dict(system_prompt=opts.system_prompt, image_root=root, image_input=image_input,
                   calibration=calibration, debias_order=opts.debias_order)  # fmt: skip
        if not isinstance(opts.questions, Path):
            out = cls(opts.questions, keep, **own)
        else:
            parsed = load_questions(opts.questions)  # raises ConfigError for a missing or bad file
            # the questions' content, not their path: an edited file must not mix old and new answers
            # (read as load_questions read it: a named pipe's content is kept, a second open hung, issue 42)
            sha = hashlib.sha256(read_at_most(opts.questions, MAX_QUESTIONS_FILE_BYTES)).hexdigest()
            out = cls(parsed, keep, sha, **own)
        if opts.debias_order > 1 and out.questions is not None:
            # shared questions: one with fewer options than the orders is refused at start
            qs = tuple(with_debias(q, opts.debias_order) for q in out.questions)
            if bad := [q.error for q in qs if isinstance(q, QuestionError)]:
                raise ConfigError("; ".join(bad))
            out = replace(out, questions=qs)
        if calibration is not None and out.questions is not None:
            calibration.check_questions(out.questions)  # a file for other questions: refused at start
        return out

    @classmethod
    def needed_columns(cls, options: LabelLogprobsOptions) -> tuple[tuple[str, str], ...]:
        # every row's conversation; without shared questions, each row's own: an input with none of either
        # is refused before the model loads
        state = ("state", "each row's conversation or text (a string, a message list or a JSON object): rename "
                          "the column that holds it to 'state' (`classify` reads 'text')")  # fmt: skip
        if options.questions is not None:
            return (state,)
        return (state, ("questions", "give them in each row or in one file with -q/--questions FILE"))

    def show(self, rows: list, prompter) -> str:
        from .show import render_rows  # lazy: keeps --help fast (the readouts load at --help)

        return render_rows(rows, prompter)

    @property
    def schema(self) -> pa.Schema:
        return OUTPUT_SCHEMA if self.calibration is None else CALIBRATED_SCHEMA

    def parse_row(self, pos: int, rec: dict[str, Any]) -> Row | RowError:
        row = parse_row(pos, rec, self.questions, self.keep, self.image_root)
        if self.debias_order > 1 and self.questions is None and isinstance(row, Row):  # a row's own questions
            qs = [with_debias(q, self.debias_order) for q in row.questions]
            named = (QuestionError(q.qid, q.type, f"row {row.id}: {q.error}") if isinstance(q, QuestionError)
                     and not q.error.startswith("row ") else q for q in qs)  # fmt: skip
            row = replace(row, questions=tuple(named))
        return row

    def unreadable(self, pos: int, why: str) -> RowError:
        return unidentified_row_error(pos, why, dict.fromkeys(self.keep), *ids_and_types(self.questions))

    def with_error(self, row: Row | RowError, error: str) -> RowError:
        qids, qtypes = (row.qids, row.qtypes) if isinstance(row, RowError) else ids_and_types(row.questions)
        return RowError(row.pos, row.id, error, qids, row.kept, qtypes)

    def n_records(self, row: Row | RowError) -> int:
        return max(1, len(row.qids)) if isinstance(row, RowError) else len(row.questions)

    def prefix_key(self, row: Row | RowError) -> str:
        # The prefix is the chat template over the fixed instructions and this text (prompt.py), and the
        # row's images (their content hashes: two rows with one text and other images share no prefix).
        return image_key(row, Prompter.body(row)) if isinstance(row, Row) else ""

    def problems(self, row: Row) -> list[str]:
        return [q.error for q in row.questions if isinstance(q, QuestionError)]

    def prompter(self, tokenizer, max_branch_tokens: int | None = None) -> Variants:
        # per-question answer leads and worked examples (prompt_variants) around the default Prompter
        base = Prompter(
            tokenizer,
            self.system_prompt or INSTRUCTIONS,
            max_branch_tokens=min(MAX_BRANCH_TOKENS, max_branch_tokens or MAX_BRANCH_TOKENS),
        )
        if self.image_input:
            base.images.check()  # ConfigError at start for a text-only model
        for q in self.questions or ():  # shared questions: a lead holding this model's control token is the
            # job's error now (`--dry-run` included), not every row's once the model runs (issue 42)
            if isinstance(q, QuestionSpec) and q.answer_lead and (
                why := lead_problem(q.answer_lead, base.text.control_pattern)
            ):
                raise ConfigError(f"questions.{q.qid}.answer_lead: {why}")
        return Variants(base)

    def records(self, row: Row, results: RowResults, failed: RowFailures) -> list[dict[str, Any]]:
        out = []
        for q in row.questions:
            its = items(q) if isinstance(q, QuestionSpec) else ()
            why = failed.get(q.qid) or next((failed[it.bid] for it in its if it.bid in failed), None)
            if why is not None:
                opts = list(q.options) if isinstance(q, QuestionSpec) else None
                out.append(self._rec(row, q.qid, q.type, error=why, options=opts))
                continue
            got = [results[it.bid] for it in its]
            # a question asked as several branches (multi, debias) counts all of their tokens
            tokens = dict(prefix_tokens=got[0][0], branch_tokens=sum(r.prompt_tokens for _, r in got),
                          cached_tokens=sum(r.cached_tokens for _, r in got))  # fmt: skip
            extra: dict[str, Any] = {}
            try:
                if err := next((r.error for _, r in got if r.error), None):
                    raise ValueError(err)
                c = combine(q, [r.values for _, r in got])
                a, extra = c.answer, {"chosen": c.chosen, "order_spread": c.order_spread}
                if self.calibration is not None:
                    a, cal = self._calibrated(q, a)
                    extra.update(cal)
            except ValueError as e:
                err = f"row {row.id}: questions.{q.qid}: {e}"
                out.append(self._rec(row, q.qid, q.type, options=list(q.options), error=err, **tokens))
                continue
            out.append(
                self._rec(
                    row, q.qid, q.type, options=list(a.options), probs=list(a.probs), answer=a.answer,
                    p_true=a.p_true, score=a.score, confidence=a.confidence, label_mass=a.label_mass, **tokens,
                    **extra,
                )
            )  # fmt: skip
        return out

    def _calibrated(self, q: QuestionSpec, a):
        """The calibrated answer and its extra columns; raises ValueError (the question's error) when the file
        has no entry for it (and does not let it go unfitted) or was fitted on other options."""
        entry = self.calibration.entry(q.qid, q.type, q.options)
        if entry is None:  # "unfitted": "raw"
            return a, {"raw_probs": list(a.probs)}
        if q.type == "multi":  # per-label P(yes): the file sets the threshold the labels are chosen at
            return a, {"chosen": [o for o, p in zip(a.options, a.probs, strict=True) if p >= entry.threshold]}
        cal, abstain = apply(entry, a)
        return cal, {"raw_probs": list(a.probs), "abstain": abstain}

    def error_records(self, row: RowError) -> list[dict[str, Any]]:
        return [
            self._rec(row, qid, row.type_of(i), error=row.error) for i, qid in enumerate(row.qids or (None,))
        ]

    def _rec(self, row, qid: str | None, qtype: str | None, **values: Any) -> dict[str, Any]:
        return self.blank(row.id, row.kept, question_id=qid, type=qtype, **values)

    def manifest(self) -> dict[str, Any]:
        key = {"readout": self.name, "questions_sha256": self.questions_sha256}
        if self.system_prompt is not None:  # only when set: partials made before the option still resume
            used = self.system_prompt.strip()  # as the prompt uses it: a file's trailing newline is no change
            key["system_prompt_sha256"] = hashlib.sha256(used.encode()).hexdigest()
        if self.debias_order > 1:  # only when set: partials made before the option still resume
            key["debias_order"] = self.debias_order
        if self.calibration is not None:  # the file's content: a refitted file must not mix answers
            key["calibration_sha256"] = self.calibration.sha256
            # where it was read, for a person reading the manifest; not compared (output/manifest.INFO): the
            # same file moved is the same job
            key["calibration_file"] = str(Path(self.calibration.path).absolute())
        return key

    def tokens(self, table: pa.Table) -> dict[str, int]:
        ok = table.filter(pc.is_null(table.column("error")))
        return {
            k: int(pc.sum(ok.column(c)).as_py() or 0)
            for k, c in (
                ("prefix", "prefix_tokens"),
                ("branch", "branch_tokens"),
                ("cached", "cached_tokens"),
            )
        }

    def answers(self, table: pa.Table) -> tuple[pa.Table, dict[str, list[str]]]:
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

    def summary_rows(self, s) -> list[tuple[str, str]]:
        cal = self.calibration
        return [
            ("rows", f"{s.rows:,}"),
            ("questions", f"{s.questions:,}"),
            ("answered", f"{s.answered:,}"),
            # answered, but below the calibrated threshold: for a person to route (issue 42.1: a run whose 300
            # rows all abstained said "answered 300 · errors 0" and nothing else)
            *((f"abstained ({q})", _share(sum(n), s.answered_rows[q])) for q, n in s.abstained.items()),
            ("errors", f"{s.errors:,}"),
            *([("calibration", f"{cal.path} (sha256 {cal.sha256[:16]})")] if cal is not None else []),
            ("branch (logical) tokens", f"{s.branch_tokens:,}"),
            ("  of which prefix", f"{s.prefix_tokens:,}"),
            ("computed tokens", f"{s.computed_tokens:,}"),
            ("cache hit rate", f"{s.cache_hit_rate:.1%}"),
            ("wall time", f"{s.wall_s:.1f} s"),
            ("output", s.output),
        ]


def _share(n: int, of: int) -> str:
    return f"{n:,} ({n / of:.1%})" if of else f"{n:,}"
