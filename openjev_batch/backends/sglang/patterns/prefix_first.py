"""Hybrid models (`prefix-first`; a recurrent state per sequence: Qwen3.5 / 3.6, Qwen3-Next; `model_info`),
measured on the H200 (`../shared/research/hybrid-models.md`): sglang caches such a prefix's state only where a
finished request left it, and a finished branch leaves it inside its suffix, so a first branch as the
warm-up caches nothing its siblings can use (1.8 % radix hit). Per group of rows: one **prefix-only** request
per distinct prefix (`max_new_tokens=0`, still carrying `token_ids_logprob`: #34719), then the group's
branches; groups are sized by the engine's recurrent-state slots (`state.state_groups`), so a cached prefix
state is not evicted before its branches run.

The backend's knobs (engine.py): `hybrid_overlap` sends the next group's prefix-only requests with a group's
branches, `hybrid_lead` such steps in flight, `hybrid_depth` groups in flight without the overlap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ....core import BranchResult, Window
from .. import requests
from ..images import item_of, prefix_key
from ..state import state_groups, steps_in_flight


def describe(backend: Any) -> str:
    b = backend.state_budget
    return (
        f"prefix-only request per prefix, groups sized by the engine's {b.slots} state slots "
        f"({b.per_request} state slots per request, ≤ {b.max_running or '?'} running, as sglang reports), "
        + (
            f"{backend.hybrid_lead} steps in flight (group k's branches beside group "
            f"k+{backend.hybrid_lead}'s prefixes; fewer where the slots would leave one prefix a group)"
            if backend.hybrid_overlap
            else "one group at a time"
        )
    )


def prefill(backend: Any, window: Window) -> list[list[BranchResult]]:
    """Per state-budgeted group: a prefix-only request for each distinct prefix (its state is cached at the
    prefix's end — sglang: at ⌊P/64⌋·64 with the default `extra_buffer` strategy), then every branch of the
    group, which reuses it. With `hybrid_overlap` the next group's prefix-only requests are sent with a
    group's branches (after them, so the scheduler admits the branches first), and the groups are sized so
    both fit the state slots at once: one forward pass per group instead of two. Prefix-only requests count
    as warm-up tokens. Raises BackendError if the engine fails."""
    rows = window.rows
    results: list[list[BranchResult | None]] = [[None] * len(r.branches) for r in rows]

    def step(g: tuple[int, int] | None, nxt: tuple[int, int] | None):
        return hybrid_step(backend, rows, results, g, nxt)

    if not backend.hybrid_overlap:
        d = backend.hybrid_depth

        def make(a: int, b: int):
            async def run() -> None:
                await step(None, (a, b))  # its prefixes, then its branches
                await step((a, b), None)

            return run

        groups = state_groups(rows, backend.state_budget, d)
        requests.run_groups(backend.engine, [make(a, b) for a, b in groups], d)
        return results  # type: ignore[return-value]
    _pipelined(backend, rows, step)
    return results  # type: ignore[return-value]


def _pipelined(backend: Any, rows: Sequence[Any], step) -> None:
    """Step k: group k-lead's branches with group k's prefix-only requests (the first `lead`: prefixes only,
    the last `lead`: branches only). Step k is sent once step k-lead has finished, so its branches' prefix
    states are in the radix cache (sglang inserts a finished request before it answers), and `lead` steps
    are in flight: the scheduler has the next batch queued while a forward runs, instead of idling through
    each round trip (measured on the H200 with lead 1, W3: the GPU busy 52 % of the traced span,
    docs/benchmarks.md run 5). A failure stops the steps after it; the steps in flight finish (or fail)
    before the window's BackendError is raised."""
    lead = steps_in_flight(rows, backend.state_budget, backend.hybrid_lead)  # fewer where groups would collapse
    groups = state_groups(rows, backend.state_budget, 1, overlap=True, lead=lead)
    n = len(groups)
    steps = [(groups[k - lead] if k >= lead else None, groups[k] if k < n else None) for k in range(n + lead)]

    async def pipeline() -> list:
        tasks: list[asyncio.Future] = []
        try:
            for k, (g, nxt) in enumerate(steps):
                if k >= lead:
                    await tasks[k - lead]
                tasks.append(asyncio.ensure_future(step(g, nxt)))
            await asyncio.gather(*tasks)
        except Exception as e:  # noqa: BLE001 — reported as the window's BackendError below
            await asyncio.gather(*tasks, return_exceptions=True)
            return [e]
        return []

    requests.raise_first(requests.wait(backend.engine, pipeline()))


async def hybrid_step(
    backend: Any, rows: Sequence[Any], results: list, g: tuple[int, int] | None, nxt: tuple[int, int] | None
) -> None:
    """Group g's branches and group nxt's prefix-only requests (one per distinct prefix; either may be None)
    as ONE request batch, branches first: one batch reaches the scheduler as one message, so both go into the
    same forward pass (two `async_generate` calls can land in different scheduler iterations). Fills
    `results` for g's branches; the prefix-only requests count as warm-up tokens."""
    if g is None and nxt is None:  # a window of fewer groups than steps in flight: nothing to send
        return
    keys = [(i, j) for i in range(*g) for j in range(len(rows[i].branches))] if g else []
    ids = [list(rows[i].prefix + rows[i].branches[j].suffix) for i, j in keys]
    labels = [list(rows[i].branches[j].label_ids) for i, j in keys]
    images = [item_of(backend, rows[i]) for i, _ in keys]  # an image row's every request carries its images
    if nxt is not None:
        firsts = [i for i in range(*nxt) if i == nxt[0] or prefix_key(rows[i]) != prefix_key(rows[i - 1])]
        ids += [list(rows[i].prefix) for i in firsts]
        labels += [list(rows[i].branches[0].label_ids) for i in firsts]  # every request carries them: #34719
        images += [item_of(backend, rows[i]) for i in firsts]
    req = requests.request(ids, labels, backend.max_new_tokens, images)
    outs = requests.as_list(await backend.engine.async_generate(**req))
    for (i, j), o in zip(keys, outs[: len(keys)], strict=True):
        results[i][j] = requests.result(rows[i], j, o)
    for o in outs[len(keys) :]:
        meta = o.get("meta_info", {})
        backend.warm_tokens += int(meta.get("prompt_tokens", 0)) - int(meta.get("cached_tokens", 0))
    backend.report([(rows[i], j, results[i][j]) for i, j in keys])
