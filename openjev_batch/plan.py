"""Planning (pure: rows in, windows out; no model, no I/O).

Rows are sorted by their prefix ids so rows that share a prefix — a common system prompt, the same
few-shot block, the same conversation asked several question sets — are adjacent, then cut into windows
whose *unique* tokens fit the engine's KV budget, so a prefix is still in the radix cache when its
branches run. Unique tokens are counted with the sorted-order longest common prefix (LCP): after
sorting, a prefix's new tokens are its length minus its LCP with the previous prefix, which is exactly
what a radix tree over the window's prefixes stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def plan(rows: Iterable[RowPrompt], kv_budget_tokens: int, max_branches: int = 4096) -> list[Window]:
    """Sort rows by prefix and cut them into windows.

    A window closes before a row whose unique tokens (its new prefix tokens + all its suffixes) would
    take the window past `kv_budget_tokens` or `max_branches`. A row larger than the budget runs alone.
    The first row of every window counts its whole prefix (the cache may have evicted it).
    Raises ValueError for a non-positive budget.
    """
    if kv_budget_tokens <= 0 or max_branches <= 0:
        raise ValueError("kv_budget_tokens and max_branches must be positive")
    ordered = sorted(rows, key=lambda r: (r.prefix, r.pos))
    windows: list[Window] = []
    cur: list[RowPrompt] = []
    new: list[int] = []
    used = branches = 0
    prev: tuple[int, ...] = ()
    for r in ordered:
        suffix = sum(len(b.suffix) for b in r.branches)
        fresh = len(r.prefix) - lcp(prev, r.prefix)
        if cur and (used + fresh + suffix > kv_budget_tokens or branches + len(r.branches) > max_branches):
            windows.append(Window(tuple(cur), tuple(new)))
            cur, new, used, branches = [], [], 0, 0
            fresh = len(r.prefix)
        cur.append(r)
        new.append(fresh)
        used += fresh + suffix
        branches += len(r.branches)
        prev = r.prefix
    if cur:
        windows.append(Window(tuple(cur), tuple(new)))
    return windows


@dataclass(frozen=True)
class StateBudget:
    """The recurrent-state slots of a hybrid (linear-attention / mamba) engine, a second scarce resource
    beside KV tokens (`../shared/research/hybrid-models.md`).

    `slots`: state slots in the engine's pool (sglang `max_mamba_cache_size`); `per_request`: slots a
    running request holds (its working state, plus sglang's ping-pong tracking buffers: 3 with the default
    `extra_buffer` strategy and the overlap scheduler); `max_running`: the engine's running-request cap.
    A cached prefix state holds one slot until its branches have run; when the pool runs short the engine
    evicts cached states LRU, so a group's prefixes must still fit beside the requests in flight."""

    slots: int
    per_request: int = 3
    max_running: int | None = None
    headroom: float = 0.9  # the radix tree's own leaves and the scheduler's look-ahead take a few slots

    def group_cost(self, prefixes: int, requests: int) -> int:
        """Slots a group holds at its peak: its cached prefix states and its running requests' states."""
        running = min(requests, self.max_running) if self.max_running else requests
        return prefixes + self.per_request * running

    def fits(self, prefixes: int, requests: int, depth: int) -> bool:
        """Whether `depth` groups of this size in flight fit the pool (and the running-request cap)."""
        usable = int(self.slots * self.headroom) // max(1, depth)
        cap_ok = not self.max_running or requests * max(1, depth) <= self.max_running
        return self.group_cost(prefixes, requests) <= usable and cap_ok


def state_groups(rows: Sequence[RowPrompt], budget: StateBudget, depth: int = 2) -> list[tuple[int, int]]:
    """Cut prefix-sorted rows into [start, end) groups whose distinct prefixes and requests fit the state
    budget with `depth` groups in flight, never splitting a run of rows that share a prefix. A group's peak
    is its cached prefix states plus its branches running (its prefix-only requests finish before its
    branches are sent; they overlap the previous group's branches, which `depth` counts). A prefix run too big
    for the budget on its own still forms one group (its state is then reused as far as the engine can).
    Pure: the sglang backend runs each group as prefix-only requests, then the group's branches."""
    groups: list[tuple[int, int]] = []
    start = 0
    prefixes = requests = 0
    i = 0
    while i < len(rows):
        j = i  # the run of rows sharing rows[i].prefix
        run_branches = 0
        while j < len(rows) and rows[j].prefix == rows[i].prefix:
            run_branches += len(rows[j].branches)
            j += 1
        p, r = prefixes + 1, requests + run_branches
        if i > start and not budget.fits(p, r, depth):
            groups.append((start, i))
            start, p, r = i, 1, run_branches
        prefixes, requests = p, r
        i = j
    if start < len(rows):
        groups.append((start, len(rows)))
    return groups
