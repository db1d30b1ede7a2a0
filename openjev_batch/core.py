"""The data passed between the stages, shared by every layer: a row ready for prefill (`RowPrompt`,
its `BranchSpec`s), a `Window` of rows run together, a backend's `BranchResult`; `lcp`, the longest
common prefix the planner and the classifier prompt split count with; a row that cannot be answered
(`RowError`) and the row-id rules every readout applies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .values import value_problem


@dataclass(frozen=True)
class BranchSpec:
    """One question of a row: its suffix ids (appended to the row's prefix) and its label ids."""

    qid: str
    suffix: tuple[int, ...]
    label_ids: tuple[int, ...]


@dataclass(frozen=True)
class RowPrompt:
    """A row ready for prefill: `prefix` ids are shared by every branch; branch i = prefix + branches[i].suffix."""

    pos: int
    row_id: str
    prefix: tuple[int, ...]
    branches: tuple[BranchSpec, ...]
    # ImageRefs (openjev_batch/images.py) whose image tokens the prefix holds, in order; their pixels go to
    # the backend beside the ids. Two prefixes of equal ids with other images are other prefixes.
    images: tuple[Any, ...] = ()


@dataclass(frozen=True)
class BranchResult:
    """What a backend returns for one branch: `values` aligned with the branch's label ids (their natural-log
    probabilities, NaN where missing) or, for the classifier-head readout, the row's raw class logits; its
    prompt tokens and how many of them the engine found cached; `error` when it could not run."""

    values: tuple[float, ...]
    prompt_tokens: int
    cached_tokens: int
    error: str | None = None

    @property
    def logprobs(self) -> tuple[float, ...]:
        return self.values


@dataclass(frozen=True)
class Window:
    """Rows run together. `new_prefix_tokens[i]` = prefix tokens row i adds to the cache (0 when it
    repeats the previous row's prefix). Token counts are in tokens."""

    rows: tuple[RowPrompt, ...]
    new_prefix_tokens: tuple[int, ...]

    @property
    def logical_tokens(self) -> int:
        return sum(
            len(r.prefix) * len(r.branches) + sum(len(b.suffix) for b in r.branches) for r in self.rows
        )

    @property
    def unique_tokens(self) -> int:
        return sum(self.new_prefix_tokens) + sum(len(b.suffix) for r in self.rows for b in r.branches)

    def halves(self) -> tuple[Window, Window]:
        """Split in two (for retrying a failed window); the second half's first row counts its whole prefix."""
        h = len(self.rows) // 2
        return (
            Window(self.rows[:h], self.new_prefix_tokens[:h]),
            Window(self.rows[h:], (len(self.rows[h].prefix),) + self.new_prefix_tokens[h + 1 :]),
        )

    @property
    def n_branches(self) -> int:
        return sum(len(r.branches) for r in self.rows)


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    if a[:n] == b[:n]:
        return n
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n  # equal values in different sequence types (tuple vs list)


# -- rows and their ids, for every readout ------------------------------------------------------------------
MAX_ID_CHARS = 4096  # row and question ids (they are repeated in every output row and error)


@dataclass(frozen=True)
class RowError:
    """A row that cannot be answered at all; it still appears in the output with this error."""

    pos: int
    id: str | None  # None only for a line that could not be parsed at all (its id is unknown)
    error: str
    qids: tuple[str, ...] = ()
    kept: dict[str, Any] = field(default_factory=dict)
    qtypes: tuple[str | None, ...] = ()  # aligned with qids where the questions were readable

    def type_of(self, i: int) -> str | None:
        return self.qtypes[i] if i < len(self.qtypes) else None


def row_id(raw: Any, pos: int) -> tuple[str, str | None]:
    """The output id of an input row: a string as given, an integer (or an integral float, as Parquet float
    columns hold them) as its digits, null → the 0-based index. Returns (id, None) or ("", problem) for an
    empty string or another type (bool, list, 1.5, …), which would otherwise become Python reprs."""
    if raw is None:
        return str(pos), None
    if isinstance(raw, str):
        return (raw, None) if raw.strip() else ("", "empty")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw), None
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw)), None
    return "", f"expected a string or an integer, got {type(raw).__name__} {raw!r}"


def checked_row_id(raw: Any, pos: int) -> tuple[str, str | None]:
    """`row_id` after the value checks every readout applies to an id: a lone surrogate or an undecodable
    cell (the id is written to every output row and error), a string over MAX_ID_CHARS."""
    problem = value_problem(raw)
    if problem is None and isinstance(raw, str) and len(raw) > MAX_ID_CHARS:
        problem = f"longer than {MAX_ID_CHARS:,} characters"
    return ("", problem) if problem else row_id(raw, pos)


def unidentified_row_error(
    pos: int,
    why: str,
    kept: dict[str, Any] | None = None,
    qids: tuple[str, ...] = (),
    qtypes: tuple[str | None, ...] = (),
) -> RowError:
    """The error row of an input row whose id cannot be used (an unreadable line, a bool/list/empty id):
    `id` null, since its index could clash with a real id; named by its 0-based index. `qids` / `qtypes`: the
    readout's records that the row still writes (the label readout's shared `-q` questions: one output row
    per question)."""
    return RowError(pos, None, f"row at index {pos}: {why}", qids, kept or {}, qtypes)


def duplicate_id_error(rid: str, first: int, pos: int) -> str:
    """The error of a row whose id an earlier row (0-based index `first`) already used."""
    return (
        f"row {rid}: id: duplicate id {rid!r}, first used by the row at index {first}"
        f" (this row's index: {pos}; a missing or null id is the row's index)"
    )


# A chunk's resume key (`--resume`, the ledger and a finished output's manifest): the input's sha256 up to the
# chunk's end, and, once a row has named an image file, the sha256 over those images' contents after it. The
# input's digest alone missed an image file changed between a crash and --resume (old and new answers mixed,
# exit 0; issue 42).
IMAGES_KEY = "+images:"


# the output column that holds each record's answer key (pipeline/reuse.py): what `run --reuse` matches
ANSWER_KEY = "answer_key"


def input_key(input_sha256: str, images_sha256: str | None) -> str:
    """The resume key of a chunk: the input's digest, with the named images' digest when there is one."""
    return input_sha256 if images_sha256 is None else f"{input_sha256}{IMAGES_KEY}{images_sha256}"


def split_input_key(key: str | None) -> tuple[str | None, str | None]:
    """(the input's sha256, the named images' sha256 or None) of a resume key."""
    if key is None:
        return None, None
    sha, sep, images = key.partition(IMAGES_KEY)
    return sha, images if sep else None
