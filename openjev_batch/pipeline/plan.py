"""Planning (pure: rows in, windows out; no model, no I/O).

Rows are sorted by their prefix ids so rows that share a prefix — a common system prompt, the same
few-shot block, the same conversation asked several question sets — are adjacent, then cut into windows
whose *unique* tokens fit the engine's KV budget, so a prefix is still in the radix cache when its
branches run. Unique tokens are counted with the sorted-order longest common prefix (LCP): after
sorting, a prefix's new tokens are its length minus its LCP with the previous prefix, which is exactly
what a radix tree over the window's prefixes stores.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core import BranchResult, BranchSpec, RowPrompt, Window, lcp  # noqa: F401
from ..job_options import BY_NAME

MAX_BRANCHES = BY_NAME["max_branches"].default  # `--max-branches`' one default (job_options.py)


def plan(rows: Iterable[RowPrompt], kv_budget_tokens: int, max_branches: int = MAX_BRANCHES) -> list[Window]:
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
