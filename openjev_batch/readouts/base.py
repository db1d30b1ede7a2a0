"""The Readout protocol: what a row asks and how the answer is read, the one thing that varies between
`run` (label logprobs over questions) and `classify` (a classifier head's logits).

The job loop (pipeline), the Ray runner, `--dry-run`, `validate` and the output store call only these
methods; none of them names a readout's row type, prompt layout or output columns. A readout is built
from plain values (no tokenizer, no model), is picklable (Ray ships it to its actors) and never raises
for row data: bad rows are `RowError` values.

    parse_row(pos, rec)  → row | RowError        (read)
    prompter(tokenizer)  → .build_many(rows)      (prompt: RowPrompts + failed questions)
    records(row, results, failed) → output rows   (read out, after prefill)
    schema, n_records, error_records, manifest   (write: columns, count check, resume key)
    show(rows, prompter) → text                   (`--show-prompt`: what the model gets)
    Request (a RequestReader) → row               (`serve`: a request body, as parse_row reads a file row)

A readout owns its options: `Options` (a `ReadoutOptions` type, each option declared once with its default),
nested in a job's RunConfig as `readout_options`; `from_config(cfg, labels)` builds it from them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from ..core import BranchResult, RowError
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import RunConfig

# One row's prefill results: question id → (its row's prefix length, the branch's result).
RowResults = dict[str, tuple[int, BranchResult]]
# One row's questions that could not be prompted: question id → error text (naming row and field).
RowFailures = dict[str, str]


@dataclass(frozen=True)
class Failed:
    """A question (a classifier-head row: its one branch) that could not be prompted (over a token limit, or
    invalid upstream): a row failure both readouts' prompters return, never raise."""

    qid: str
    error: str


class FieldError(ValueError):
    """A request body refused (`serve`: a 422): `message` one line, `field` the body's field it names (dotted,
    `questions.q1.criteria`; None for the body as a whole)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class RequestReader(ABC):
    """How a readout reads a request body into its row, as `parse_row` reads a file row: built once per
    server (`held`) from the readout held open. `fields`: the body's keys; `caps`: the readout's own limits
    by `serve/limits.Limits` field name (a server may lower them, never raise them); `readout`: the readout
    whose records answer a request."""

    fields: ClassVar[tuple[str, ...]]
    caps: ClassVar[dict[str, int]] = {}
    readout: Readout

    @classmethod
    @abstractmethod
    def held(cls, readout: Readout, cfg: RunConfig) -> RequestReader:
        """The reader of a server over `readout`, built from the server's config `cfg` (a RunConfig: its
        readout options, e.g. label-logprobs' `-q` questions that a request may ask by id)."""

    @abstractmethod
    def row(self, body: dict[str, Any], limits: Mapping[str, int]) -> Any:
        """The row of `body` (a JSON object), at position 0. Raises FieldError."""

    def seed_row(self, body: dict[str, Any], limits: Mapping[str, int]) -> Any:
        """The row of a body the seed's route made (serve/seed.py `row_body`: `messages` and `questions`), where
        the seed takes a state `row` refuses (label-logprobs: a conversation of empty texts, the seed's
        `state: ""`). By default `row`'s. Raises FieldError."""
        return self.row(body, limits)

    def check(self, row: Any, prompt: Any, limits: Mapping[str, int]) -> FieldError | None:
        """A prompted row (`prompt`: its core.RowPrompt) over the server's token limits, before any model
        call; None when it fits."""
        return None

    def refused(self, row: Any, error: str) -> FieldError:
        """The FieldError of a row the prompter refused (`error`: its failure's text, e.g. a branch over the
        model's context)."""
        return FieldError(error)

    def describe(self) -> dict[str, Any]:
        """What GET /v1/models tells of this reader's readout (its manifest: the `--resume` key's part)."""
        return self.readout.manifest()


class ReadoutOptions(BaseModel):
    """A readout's own job options (frozen; another readout's option is an unknown key). A subclass declares
    each option once, with its default and bounds, and its `Flag` (help, the commands besides its own that
    take it); the CLI flag is the field's name (`system_prompt` → `--system-prompt`). RunConfig nests the
    chosen readout's as `readout_options`."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    def files(self) -> list[tuple[Path, str]]:
        """Files the job reads besides its input, each with how a message names it: a job must not write
        its output over one (config.check_not_input)."""
        return []


class Readout(ABC):
    """A readout (see the module docstring). `name` is the `--readout` value (set by `@register`); `keep`
    the kept input columns, appended to `schema`'s columns in every output record; `backend_kind` picks the
    backend class that serves it (`backends.load_backend(name, opts, kind)`); `unit` names a prefill unit in
    progress bars, `noun` what a record answers.

    Class facts, known without building one: `Options` (its options type), `command` (the CLI command that
    runs it), `input_columns` (what it reads), `base_columns` (what it always writes), `text_column` (the
    column a bare list of texts fills), `chunk_rows` (its default chunk size: the `--chunk-rows` default)."""

    name: ClassVar[str]
    backend_kind: ClassVar[str]
    unit: ClassVar[str] = "branches"
    noun: ClassVar[str] = "row"
    command: ClassVar[str]
    Options: ClassVar[type[ReadoutOptions]] = ReadoutOptions
    input_columns: ClassVar[tuple[str, ...]]
    base_columns: ClassVar[tuple[str, ...]]
    text_column: ClassVar[str]
    chunk_rows: ClassVar[int]
    # how `serve` reads a request body into this readout's row (None: the readout is not served)
    Request: ClassVar[type[RequestReader] | None] = None
    keep: tuple[str, ...] = ()

    @classmethod
    @abstractmethod
    def from_config(cls, cfg: RunConfig, labels: tuple[str, ...] | None = None) -> Readout:
        """The readout of a job: `cfg` a RunConfig (its `keep`, `model`, and `readout_options` of type
        `Options`); `labels` a started backend's, where the readout needs them. Raises ConfigError /
        BackendError."""

    @classmethod
    def needed_columns(cls, options: ReadoutOptions) -> tuple[tuple[str, str], ...]:
        """The columns some row of the input must have under `options` (checked before the model loads),
        each with the hint a refusal gives."""
        return ()

    def show(self, rows: list, prompter) -> str:
        """`rows` (parsed rows and RowErrors) as the model gets them, as text (`--show-prompt`). Raises
        ConfigError for a readout without a prompt display."""
        raise ConfigError(f"--show-prompt is not for {self.command} ({self.name})")

    @property
    @abstractmethod
    def schema(self) -> pa.Schema:
        """The output columns before the kept ones, in order (the same for every chunk and run)."""

    @abstractmethod
    def parse_row(self, pos: int, rec: dict[str, Any]) -> Any:
        """One input record → the readout's row (with `.pos`, `.id`, `.kept`) or a RowError; never raises."""

    @abstractmethod
    def unreadable(self, pos: int, why: str) -> RowError:
        """The error row of a record whose id cannot be used (an unreadable line, a bool/list id)."""

    @abstractmethod
    def with_error(self, row: Any, error: str) -> RowError:
        """`row` (parsed or an error) turned into a RowError with `error`, keeping its question ids."""

    @abstractmethod
    def n_records(self, row: Any) -> int:
        """Output rows one input row (or RowError) produces; the count check sums it."""

    @abstractmethod
    def prefix_key(self, row: Any) -> str:
        """Text that is equal for two rows exactly when their prompts share the whole prefix, known without
        a tokenizer: the Ray driver buckets rows by it so one engine prefills each prefix."""

    @abstractmethod
    def problems(self, row: Any) -> list[str]:
        """Row-level problems `validate` reports for a parsed row (e.g. its invalid questions)."""

    @abstractmethod
    def prompter(self, tokenizer, max_branch_tokens: int | None = None):
        """An object whose `build_many(rows)` returns, aligned with `rows`, (RowPrompt or None, failures)
        with failures a tuple of objects with `.qid` and `.error`. May raise a job-level OpenjevError."""

    @abstractmethod
    def records(self, row: Any, results: RowResults, failed: RowFailures) -> list[dict[str, Any]]:
        """The output records of one parsed row, in output order, from its prefill results and failures."""

    @abstractmethod
    def error_records(self, row: RowError) -> list[dict[str, Any]]:
        """The output records of a RowError (`n_records(row)` of them), each carrying its error."""

    def manifest(self) -> dict[str, Any]:
        """What besides the input, model and engine identifies this readout's output (`--resume` key)."""
        return {"readout": self.name}

    @abstractmethod
    def tokens(self, table: pa.Table) -> dict[str, int]:
        """Token counts of a job from its output rows (`error`-free ones): prefix, branch and cached tokens."""

    @abstractmethod
    def summary_rows(self, summary) -> list[tuple[str, str]]:
        """The end-of-run table for this readout's vocabulary (rows / questions / labels)."""

    def answers(self, table: pa.Table) -> tuple[pa.Table, dict[str, list[str]]] | None:
        """For the end-of-run answer distribution: the answered records of `table` as columns `question`,
        `answer`, `confidence` (optional: `abstain`, a calibrated answer's; `row`, 1 on the one entry that
        counts an answered row, when a row has several entries or none with an answer), and each question's
        options in their order. None: the readout has none (pipeline/summary.AnswerCounts)."""
        return None

    # helpers shared by the readouts ------------------------------------------------------------------
    def blank(self, row_id: str | None, kept: dict[str, Any], **values: Any) -> dict[str, Any]:
        """An output record with every column null but `values`, then the kept columns."""
        rec = dict.fromkeys(self.schema.names)
        rec.update(values)
        rec.update({k: kept.get(k) for k in self.keep})  # an unreadable line has no kept values
        rec["id"] = row_id
        return rec
