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

    def steps_fit(self, groups: Sequence[tuple[int, int]], lead: int) -> bool:
        """Whether the pipelined schedule's window of `lead` steps ending at the last of `groups` ((prefixes,
        requests) per group, in order) fits, counted from the groups as they are, not as if all were the last
        one's size: step j sends group j-lead's requests and group j's prefix-only requests, so the window
        runs Σ (R[j-lead] + P[j]) requests (≤ the running cap) beside the prefix states of its groups and
        the `lead` before them (`pipelined_cost`'s lead + 1 groups, here each its own size)."""
        k = len(groups) - 1
        running = sum(
            (groups[j - lead][1] if j >= lead else 0) + groups[j][0] for j in range(max(0, k - lead + 1), k + 1)
        )
        if self.max_running and running > self.max_running:
            return False
        cached = sum(groups[j][0] for j in range(max(0, k - lead), k + 1))
        return cached + self.per_request * running <= self.usable()

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

    done: list[tuple[int, int]] = []  # the groups cut so far: (prefixes, requests)

    def ok(p: int, r: int) -> bool:
        if lead > 1:  # this size for the groups ahead, and the window it closes as the groups before really are
            return budget.pipelined_fits(p, r, lead) and budget.steps_fit([*done, (p, r)], lead)
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
            done.append(prev)
            start, p, r = i, 1, run_branches
        prefixes, requests = p, r
        i = j
    if start < len(rows):
        groups.append((start, len(rows)))
    return groups


def prefix_runs(rows: Sequence[RowPrompt], a: int, b: int) -> int:
    """Distinct prefixes (runs of rows that share one) in rows[a:b]: a group's prefix-only requests."""
    return sum(1 for i in range(a, b) if i == a or prefix_key(rows[i]) != prefix_key(rows[i - 1]))


def steps_in_flight(rows: Sequence[RowPrompt], budget: StateBudget, asked: int) -> int:
    """The steps in flight prefix-first runs for a window (`asked`: --pipeline-depth, 2 by default), so that it
    never collapses. Each step in flight keeps one more group of prefix states beside its running requests
    (`pipelined_cost`), so where the engine's state slots are few the asked lead can shrink every group to a
    single prefix: one row a forward, and on a MoE model every forward reads all its experts' weights for it.
    Then fewer steps in flight are taken, the most that keep at least two prefixes a group (else the lead with
    the largest groups; the asked one on a tie): larger forwards with a round trip between them. Where the
    slots are many (the H200's 807 with the batch-job memory: 29 W3 rows a group at lead 2) the asked lead
    stands, as measured (docs/benchmarks.md run 5b: two steps 57.6 s against one step 68.4 s).

    NOT measured on a GPU (issue 38's device time was spent). The arithmetic (docs/benchmarks.md, issue 38):
    an 80 GB card with the bf16 35B-A3B weights keeps about 64-85 state slots at 5 a running request (≤ 13-17
    running); with 80 slots, cap 16, W3 rows (1 prefix, 3 questions) lead 2 fits one row a group (3 + 5 · 8 =
    43 of 78 usable; two rows: 6 + 5 · 16 = 86) and lead 1 three rows (6 + 5 · 12 = 66). Even so prefix-first
    within 2x of multi-item (1 slot a request) on such a card looks out of reach without fp8 weights. Pure."""
    asked = max(1, asked)
    if asked == 1 or prefix_runs(rows, 0, len(rows)) < 2:
        return asked
    per_group = {}
    for lead in range(asked, 0, -1):
        groups = state_groups(rows, budget, 1, overlap=True, lead=lead)
        per_group[lead] = sum(prefix_runs(rows, a, b) for a, b in groups) / len(groups)
        if per_group[lead] >= 2:
            return lead
    return max(per_group, key=lambda lead: (per_group[lead], lead))


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
