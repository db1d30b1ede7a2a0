"""Dense models (`first-branch`): per group of rows, one request batch with the first branch of each distinct
prefix (it puts the prefix in the radix cache and is answered too, so a row with N questions costs N
requests, not N+1), then one with every other branch, which computes only its suffix. A window is cut into
`groups_per_window` groups that run as a `depth`-deep pipeline on the engine's own loop, so the scheduler
batches the compute-heavy warm-ups of group g+1 with the light, request-heavy branches of group g instead of
leaving the GPU idle while it retires thousands of short requests."""

from __future__ import annotations

from typing import Any

from ....core import BranchResult, Window
from .. import requests
from ..images import item_of, prefix_key


def describe(backend: Any) -> str:
    return (
        f"first branch per prefix as the warm-up, {backend.groups_per_window} groups, "
        f"{backend.depth} in flight"
    )


def groups(window: Window, groups_per_window: int) -> list[tuple[list, list]]:
    """Cut the window's rows into ≤ `groups_per_window` runs of about equal branch count, never splitting
    rows that share a prefix; per group, (warm-up keys, rest keys) as (row, branch) index pairs."""
    target = max(1, -(-window.n_branches // max(1, groups_per_window)))
    out: list[tuple[list, list]] = []
    first: list = []
    rest: list = []
    last, size = None, 0
    for i, r in enumerate(window.rows):
        key = prefix_key(r)  # equal ids with other images are another prefix
        if key != last and size >= target:
            out.append((first, rest))
            first, rest, size = [], [], 0
        for j in range(len(r.branches)):
            (first if j == 0 and key != last else rest).append((i, j))
        size += len(r.branches)
        last = key
    if first or rest:
        out.append((first, rest))
    return out


def prefill(backend: Any, window: Window) -> list[list[BranchResult]]:
    """Label logprobs of every branch of the window, `backend.depth` groups in flight (every request
    carries `token_ids_logprob`, #34719; an image row's, its images). Raises BackendError if the engine fails."""
    rows = window.rows
    results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]

    def make(first: list, rest: list):
        async def run() -> None:
            for keys in (first, rest):  # rest only once its prefixes are cached
                if not keys:
                    continue
                req = requests.request(
                    [list(rows[i].prefix + rows[i].branches[j].suffix) for i, j in keys],
                    [list(rows[i].branches[j].label_ids) for i, j in keys],
                    backend.max_new_tokens,
                    [item_of(backend, rows[i]) for i, _ in keys],  # an image row's every request: images.py
                )
                outs = requests.as_list(await backend.engine.async_generate(**req))
                for (i, j), o in zip(keys, outs, strict=True):
                    results[i][j] = requests.result(rows[i], j, o)
                backend.report([(rows[i], j, results[i][j]) for i, j in keys])

        return run

    todo = [make(f, r) for f, r in groups(window, backend.groups_per_window)]
    requests.run_groups(backend.engine, todo, backend.depth)
    return results  # type: ignore[return-value]
