"""The recurrent-state budget of a hybrid (linear-attention / mamba) sglang engine, and the groups of rows it
allows in flight (pure: no engine, no I/O). The sglang backend's prefix-first pattern runs each group as
prefix-only requests, then its branches (engine.py); `SGLangBackend.configure` sets the budget per job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core import RowPrompt
from .images import prefix_key


@dataclass(frozen=True)
class StateBudget:
    """The recurrent-state slots of a hybrid (linear-attention / mamba) engine, a second scarce resource
    beside KV tokens (`../shared/research/hybrid-models.md`).

    `slots`: state slots in the engine's pool (sglang `max_mamba_cache_size`); `per_request`: slots a
    running request holds (its working state, plus sglang's ping-pong tracking buffers: 3 with the default
    `extra_buffer` strategy and the overlap scheduler); `max_running`: the engine's running-request cap.
    A cached prefix state holds one slot until its branches have run; when the pool runs short the engine
    evicts cached states LRU, so a group's prefixes must still fit beside the requests in flight.
    `reserve`: slots kept free for the radix tree's own leaves and the scheduler's look-ahead; default 2 %
    (at least 2). Measured on the H200 (35B-A3B shape, 207 slots, `benchmarks/results/2026-12-01-h200-hybrid-
    run3.json`): groups holding 200 of the 207 slots still served every prefix token from the cache."""

    slots: int
    per_request: int = 3
    max_running: int | None = None
    reserve: int | None = None

    def usable(self, depth: int = 1) -> int:
        """Slots one of `depth` groups in flight may hold at its peak."""
        keep = self.reserve if self.reserve is not None else max(2, self.slots // 50)
        return max(1, self.slots - keep) // max(1, depth)

    def group_cost(self, prefixes: int, requests: int, ahead: int = 0) -> int:
        """Slots a group holds at its peak: its cached prefix states, its running requests' states and those
        of the next group's `ahead` prefix-only requests, which run beside its branches."""
        running = requests + ahead
        if self.max_running:
            running = min(running, self.max_running)
        return prefixes + self.per_request * running

    def pipelined_cost(self, prefixes: int, requests: int, lead: int) -> int:
        """Peak slots of the pipelined schedule (`lead` steps in flight; step k = group k-lead's branches
        and group k's prefix-only requests), all groups this size: the prefix states of lead + 1 groups
        (computed, waiting or in use) and the running requests of `lead` steps, at most the running cap."""
        running = lead * (requests + prefixes)
        if self.max_running:
            running = min(running, self.max_running)
        return (lead + 1) * prefixes + self.per_request * running

    def pipelined_fits(self, prefixes: int, requests: int, lead: int) -> bool:
        """Whether the pipelined schedule with groups this size fits the pool, and its `lead` steps in flight
        the running-request cap: beyond the cap they queue, and once a queued batch is admitted its cached
        prefix states are copied in one go (H200 run 9, docs/benchmarks.md: with `no_buffer` (1 slot a
        request) groups grew 6x, ~267 prefix-hit requests met in one extend batch and sglang 0.5.17's state
        copy asked 15.6 GiB: CUDA OOM)."""
        cap_ok = not self.max_running or lead * (prefixes + requests) <= self.max_running
        return cap_ok and self.pipelined_cost(prefixes, requests, lead) <= self.usable()

    def fits(self, prefixes: int, requests: int, depth: int = 1, ahead: int = 0) -> bool:
        """Whether `depth` groups of this size in flight fit the pool (and the running-request cap)."""
        cap_ok = not self.max_running or (requests + ahead) * max(1, depth) <= self.max_running
        return self.group_cost(prefixes, requests, ahead) <= self.usable(depth) and cap_ok


def state_groups(
    rows: Sequence[RowPrompt], budget: StateBudget, depth: int = 1, overlap: bool = False, lead: int = 1
) -> list[tuple[int, int]]:
    """Cut prefix-sorted rows into [start, end) groups whose distinct prefixes and requests fit the state
    budget with `depth` groups in flight, never splitting a run of rows that share a prefix. A group's peak
    is its cached prefix states plus its branches running (its prefix-only requests finish before its
    branches are sent). With `overlap`, the next group's prefix-only requests run beside a group's branches
    (the sglang backend sends both at once): a group also fits with as many prefix-only requests again
    running beside it (the next group is not cut yet), and the previous group fits with this one's.
    A prefix run too big for the budget on its own still forms one group (its state is then reused as far as
    the engine can). With `lead` > 1 (the pipelined schedule, `StateBudget.pipelined_cost`), `lead` steps are
    in flight, so the scheduler always has the next batch queued: groups are sized so that the prefix states
    of lead + 1 groups survive beside `lead` steps of running requests.
    Pure: the sglang backend runs each group as prefix-only requests, then its branches."""
    groups: list[tuple[int, int]] = []
    start = 0
    prefixes = requests = 0
    prev: tuple[int, int] | None = None  # the previous group's (prefixes, requests)

    def ok(p: int, r: int) -> bool:
        if lead > 1:
            return budget.pipelined_fits(p, r, lead)
        if not overlap:
            return budget.fits(p, r, depth)
        before = prev is None or budget.fits(prev[0], prev[1], depth, ahead=p)
        return before and budget.fits(p, r, depth, ahead=p)

    i = 0
    while i < len(rows):
        j = i  # the run of rows sharing rows[i].prefix
        run_branches = 0
        while j < len(rows) and prefix_key(rows[j]) == prefix_key(rows[i]):  # other images: another prefix
            run_branches += len(rows[j].branches)
            j += 1
        p, r = prefixes + 1, requests + run_branches
        if i > start and not ok(p, r):
            groups.append((start, i))
            prev = (prefixes, requests)
            start, p, r = i, 1, run_branches
        prefixes, requests = p, r
        i = j
    if start < len(rows):
        groups.append((start, len(rows)))
    return groups


def state_budget_from_info(info: dict[str, Any]) -> StateBudget | None:
    """The recurrent-state budget as the started engine reports it (`Engine.get_server_info()`), never from a
    constant: `max_mamba_cache_size` (computed in the scheduler and reported in `internal_states`, or at the top
    level when the user set it) and the running cap (`effective_max_running_requests_per_dp` /
    `max_running_requests`). Slots per running request = slots // cap: sglang caps running requests at
    slots // its ratio (`kv_cache_configurator.resolve_max_num_reqs`, which logs "N state slots per request":
    3 for the base strategy, 5 for `extra_buffer` with the overlap scheduler, the released Qwen3.5/3.6
    architecture's default on the H200, 1 with the radix cache off). When the cap comes from elsewhere (a user
    setting below the state cap) slots // cap overstates it, which only makes groups smaller. With no cap
    reported, slots // 3 is assumed running, as sglang's base ratio. None when nothing says."""
    states = info.get("internal_states") or [{}]
    inner = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}

    def count(key: str) -> int | None:
        for d in (inner, info):
            v = d.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return None

    running = count("effective_max_running_requests_per_dp") or count("max_running_requests")
    slots = count("max_mamba_cache_size") or (running * 3 if running else None)
    if not slots:
        return None
    per_request = max(1, slots // running) if running else 3
    return StateBudget(slots=slots, per_request=per_request, max_running=running)
