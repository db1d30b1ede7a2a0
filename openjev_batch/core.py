"""The data passed between the stages, shared by every layer: a row ready for prefill (`RowPrompt`,
its `BranchSpec`s), a `Window` of rows run together, a backend's `BranchResult`; `lcp`, the longest
common prefix the planner and the classifier prompt split count with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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
