"""The `label-logprobs` readout (`run`): every row asks questions; each question's answer is read from the
next-token logprobs of its option labels (answer.py for the math, prompt.py for the layout, output.py for
the records and their columns).

Output: one record per input row × question, in the row's question order:
`id, question_id, type, options, probs, answer, p_true, score, confidence, label_mass, prefix_tokens,
branch_tokens, cached_tokens, error, chosen, order_spread` (with --calibration also `raw_probs, abstain`), then
the kept columns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from ...core import RowError, unidentified_row_error
from ...errors import ConfigError
from ...values import read_at_most
from .. import LABEL_LOGPROBS, register
from ..base import Readout, ReadoutOptions, RowFailures, RowResults
from ..image_prompt import check_model_takes_images
from ..rows_images import image_key, input_has_image_column
from .calibration import Calibration, load_calibration
from .items import with_debias
from .leads import lead_problem
from .options import SYSTEMONE, TRANSCRIPT, LabelLogprobsOptions
from .output import (
    CALIBRATED_SCHEMA,
    OUTPUT_SCHEMA,
    answer_table,
    question_records,
    summary_rows,
    token_totals,
)
from .prompt import INSTRUCTIONS, Prompter
from .prompt_systemone import UNSUPPORTED, SystemOnePrompter, state_key
from .prompt_variants import Variants
from .questions import MAX_QUESTIONS_FILE_BYTES, QuestionError, QuestionSpec, load_questions
from .request import LabelRequest
from .rows import MAX_BRANCH_TOKENS, Row, ids_and_types, parse_row

if TYPE_CHECKING:
    from ...config import RunConfig


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
    layout: str = TRANSCRIPT  # --layout: the prompt (transcript: prompt.py; systemone: prompt_systemone.py)

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
    Request = LabelRequest  # how `serve` reads a request body into a row (request.py)

    @classmethod
    def from_config(cls, cfg: RunConfig, labels: Any = None) -> LabelLogprobs:
        """The questions of the options: a file's (read here; raises ConfigError for a missing or bad
        one), parsed ones (the Python API's mapping), or None (each row's own); the calibration of
        `calibration` (`--calibration`; raises ConfigError for a missing or bad file, or shared questions it
        cannot apply to); `debias_order` (shared questions too small for the orders: ConfigError)."""
        opts, keep = cast(LabelLogprobsOptions, cfg.readout_options), tuple(cfg.keep)  # a job of this readout
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
            calibration.check_debias_order(opts.debias_order)  # fitted on other probabilities: refused
        own: dict[str, Any] = dict(system_prompt=opts.system_prompt, image_root=root, image_input=image_input,
                   calibration=calibration, debias_order=opts.debias_order, layout=opts.layout)  # fmt: skip
        if opts.layout == SYSTEMONE and opts.system_prompt is not None:
            raise ConfigError("--system-prompt is the transcript layout's system message; under --layout "
                              "systemone a row's own system message is its system turn")  # fmt: skip
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
            out = replace(out, questions=tuple(q for q in qs if isinstance(q, QuestionSpec)))  # none refused
        if calibration is not None and out.questions is not None:
            calibration.check_questions(out.questions)  # a file for other questions: refused at start
        return out

    @classmethod
    def needed_columns(cls, options: ReadoutOptions) -> tuple[tuple[str, str], ...]:
        options = cast(LabelLogprobsOptions, options)  # this readout's own (the base names the base type)
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
        if not isinstance(row, Row):
            return ""
        return image_key(row, state_key(row) if self.layout == SYSTEMONE else Prompter.body(row))

    def problems(self, row: Row) -> list[str]:
        return [q.error for q in row.questions if isinstance(q, QuestionError)]

    def prompter(self, tokenizer, max_branch_tokens: int | None = None) -> Variants | SystemOnePrompter:
        limit = min(MAX_BRANCH_TOKENS, max_branch_tokens or MAX_BRANCH_TOKENS)
        if self.layout == SYSTEMONE:
            return self._systemone(tokenizer, limit)
        # per-question answer leads and worked examples (prompt_variants) around the default Prompter
        base = Prompter(tokenizer, self.system_prompt or INSTRUCTIONS, max_branch_tokens=limit)
        if self.image_input:
            base.images.check()  # ConfigError at start for a text-only model
        for q in self.questions or ():  # shared questions: a lead holding this model's control token is the
            # job's error now (`--dry-run` included), not every row's once the model runs (issue 42)
            if isinstance(q, QuestionSpec) and q.answer_lead and (
                why := lead_problem(q.answer_lead, base.text.control_pattern)
            ):
                raise ConfigError(f"questions.{q.qid}.answer_lead: {why}")
        return Variants(base)

    def _systemone(self, tokenizer, limit: int) -> SystemOnePrompter:
        """The seed's layout; shared questions it cannot ask (an answer lead, worked examples) are the job's
        error at start, not every row's."""
        if self.image_input:
            raise ConfigError("--layout systemone reads text states only: the input has an image column "
                              "(use --layout transcript)")  # fmt: skip
        for q in self.questions or ():
            if isinstance(q, QuestionSpec) and (q.answer_lead is not None or q.examples):
                key = "answer_lead" if q.answer_lead is not None else "examples"
                raise ConfigError(f"questions.{q.qid}.{key}: {UNSUPPORTED}")
        return SystemOnePrompter(tokenizer, max_branch_tokens=limit)

    def records(self, row: Row, results: RowResults, failed: RowFailures) -> list[dict[str, Any]]:
        return question_records(row, results, failed, self.calibration, self._rec)

    def error_records(self, row: RowError) -> list[dict[str, Any]]:
        return [
            self._rec(row, qid, row.type_of(i), error=row.error) for i, qid in enumerate(row.qids or (None,))
        ]

    def _rec(self, row, qid: str | None, qtype: str | None, **values: Any) -> dict[str, Any]:
        return self.blank(row.id, row.kept, question_id=qid, type=qtype, **values)

    def manifest(self) -> dict[str, Any]:
        key: dict[str, Any] = {"readout": self.name, "questions_sha256": self.questions_sha256}
        if self.system_prompt is not None:  # only when set: partials made before the option still resume
            used = self.system_prompt.strip()  # as the prompt uses it: a file's trailing newline is no change
            key["system_prompt_sha256"] = hashlib.sha256(used.encode()).hexdigest()
        if self.layout != TRANSCRIPT:  # only when set: partials made before the option still resume
            key["layout"] = self.layout
        if self.debias_order > 1:  # only when set: partials made before the option still resume
            key["debias_order"] = self.debias_order
        if self.calibration is not None:  # the file's content: a refitted file must not mix answers
            key["calibration_sha256"] = self.calibration.sha256
            # where it was read, for a person reading the manifest; not compared (output/manifest.INFO): the
            # same file moved is the same job
            key["calibration_file"] = str(Path(self.calibration.path).absolute())
        return key

    def tokens(self, table: pa.Table) -> dict[str, int]:
        return token_totals(table)

    def answers(self, table: pa.Table) -> tuple[pa.Table, dict[str, list[str]]]:
        return answer_table(table)

    def summary_rows(self, s) -> list[tuple[str, str]]:
        return summary_rows(s, self.calibration)
