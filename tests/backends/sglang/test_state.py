"""The recurrent-state budget of hybrid models (backends/sglang/state.py): pure, no engine."""

from token_rows import row

from openjev_batch.backends.sglang.state import (
    StateBudget,
    prefix_runs,
    state_budget_from_info,
    state_groups,
    steps_in_flight,
)

# The H200 numbers for the 35B-A3B shape (../shared/research/hybrid-models.md): 422 slots, 3 per running
# request, at most 140 running.
H200_35B = StateBudget(slots=422, per_request=3, max_running=140)


def _peak(rows, a, b, budget):
    prefixes = len({r.prefix for r in rows[a:b]})
    return budget.group_cost(prefixes, sum(len(r.branches) for r in rows[a:b]))


def test_state_groups_fit_two_in_flight_and_cover_every_row_once():
    rows = [row(i, [i] * 50, n_q=8) for i in range(64)]  # W1-like: 64 distinct prefixes × 8 questions
    groups = state_groups(rows, H200_35B, depth=2)
    assert [i for a, b in groups for i in range(a, b)] == list(range(64))  # contiguous, in order, once
    usable = (422 - 422 // 50) // 2  # 2 % kept back, two groups in flight
    assert H200_35B.usable(2) == usable == 207
    for a, b in groups:
        assert _peak(rows, a, b, H200_35B) <= usable
        assert 2 * sum(len(r.branches) for r in rows[a:b]) <= 140
    # 1 + 3 × 8 = 25 slots a row → 8 rows a group (200 slots: the measured sweet spot)
    assert max(b - a for a, b in groups) == 8 and len(groups) == 8


def test_state_groups_with_overlap_leave_room_for_the_next_groups_prefix_requests():
    """The H200's 35B-A3B engine (207 slots, ≤ 69 running): one group at a time holds 8 W1 rows (8 × 25 = 200
    slots); with the next group's prefix-only requests running beside a group's branches, each row also
    reserves one request's 3 slots, so 7 rows (7 × 28 = 196) and 7 × 9 = 63 running requests."""
    h200 = StateBudget(slots=207, per_request=3, max_running=69)
    rows = [row(i, [i] * 50, n_q=8) for i in range(64)]
    alone = state_groups(rows, h200, depth=1)
    both = state_groups(rows, h200, depth=1, overlap=True)
    assert [b - a for a, b in alone] == [8] * 8
    assert [b - a for a, b in both] == [7] * 9 + [1]
    for (a, b), nxt in zip(both, both[1:] + [(len(rows), len(rows))], strict=True):
        ahead = len({r.prefix for r in rows[nxt[0] : nxt[1]]})
        cost = h200.group_cost(b - a, 8 * (b - a), ahead)
        assert cost <= h200.usable() and 8 * (b - a) + ahead <= 69
    # W3-like rows (3 questions): the running cap binds before the slots do without overlap
    w3 = [row(i, [i] * 50, n_q=3) for i in range(100)]
    assert max(b - a for a, b in state_groups(w3, h200)) == 20  # 20 × 10 = 200 slots, 60 running
    assert max(b - a for a, b in state_groups(w3, h200, overlap=True)) == 15  # 15 × 13 = 195, 60 running
    # one-question rows after a full group: alone they would take 29 a group (7 slots each), but the group
    # before must still fit with their prefix requests beside its branches (8 + 3 × (57 + k) ≤ 203 → k ≤ 8)
    mixed = [row(i, [i] * 50, n_q=8) for i in range(7)] + [
        row(100 + i, [100 + i] * 50, n_q=1) for i in range(30)
    ]
    groups = state_groups(mixed, h200, overlap=True)
    assert groups == [(0, 8), (8, 16), (16, 37)]


def test_state_groups_get_larger_with_more_slots_and_fewer_in_flight():
    rows = [row(i, [i] * 50, n_q=3) for i in range(200)]
    small = state_groups(rows, StateBudget(slots=100, per_request=3), depth=2)
    big = state_groups(rows, StateBudget(slots=1000, per_request=3), depth=2)
    single = state_groups(rows, StateBudget(slots=100, per_request=3), depth=1)
    assert len(big) < len(single) < len(small)
    # the running-request cap binds too: 10 running at most, 2 groups in flight → ≤ 5 branches a group
    capped = state_groups(rows, StateBudget(slots=10_000, per_request=1, max_running=10), depth=2)
    assert all(sum(len(r.branches) for r in rows[a:b]) <= 5 for a, b in capped)


def test_state_groups_never_split_rows_that_share_a_prefix():
    shared = [9] * 40
    rows = [row(i, shared, n_q=8) for i in range(30)] + [row(100 + i, [i] * 40, n_q=8) for i in range(10)]
    rows = sorted(rows, key=lambda r: r.prefix)
    groups = state_groups(rows, H200_35B, depth=2)
    starts = {a for a, _ in groups}
    for i in range(1, len(rows)):
        if rows[i].prefix == rows[i - 1].prefix:
            assert i not in starts
    # the 30-row run (240 branches) is larger than the budget: it still runs, as one group
    assert any(b - a >= 30 for a, b in groups)
    assert sum(b - a for a, b in groups) == 40


def test_state_budget_refuses_more_running_requests_than_the_engine_runs():
    b = StateBudget(slots=422, per_request=3, max_running=140)
    assert b.group_cost(7, 56) == 7 + 3 * 56
    assert b.group_cost(1, 1000) == 1 + 3 * 140  # queued requests wait: only 140 hold states
    assert b.fits(7, 56, depth=2) and b.fits(8, 64, depth=2) and not b.fits(9, 72, depth=2)
    assert b.fits(9, 72, depth=1) and not b.fits(9, 72, depth=1, ahead=70)  # 142 running > 140


def test_state_budget_from_engine_info():
    """What the sglang backend reads from `Engine.get_server_info()` for a hybrid model (no engine needed):
    the scheduler's resolved `max_mamba_cache_size` (what sglang 0.5.17 reported on the H200), the user's
    own setting at the top level, else the running cap × 3."""
    h200 = {  # the fields as sglang 0.5.17 returned them for the 35B-A3B shape (2026-12-01 run)
        "max_running_requests": None,
        "internal_states": [
            {
                "max_mamba_cache_size": 207,
                "mamba_radix_cache_strategy": "auto",
                "effective_max_running_requests_per_dp": 69,
            }
        ],
    }
    b = state_budget_from_info(h200)
    assert (b.slots, b.per_request, b.max_running) == (207, 3, 69)
    user_set = state_budget_from_info({"max_mamba_cache_size": 100, "max_running_requests": 20})
    assert (user_set.slots, user_set.per_request, user_set.max_running) == (100, 5, 20)  # slots // cap
    # the released Qwen3.5/3.6 class runs extra_buffer with the overlap scheduler: sglang caps 807 slots at 161
    # running (5 a request, as its log says); the budget reads 5, not a constant 3
    extra = state_budget_from_info({"internal_states": [{"max_mamba_cache_size": 807, "max_running_requests": 161}]})
    assert (extra.slots, extra.per_request, extra.max_running) == (807, 5, 161)
    radix_off = state_budget_from_info({"max_mamba_cache_size": 400, "max_running_requests": 400})
    assert radix_off.per_request == 1
    only_cap = state_budget_from_info({"internal_states": [{"effective_max_running_requests_per_dp": 50}]})
    assert only_cap.slots == 150 and only_cap.max_running == 50
    assert state_budget_from_info({"max_total_num_tokens": 1000}) is None
    assert state_budget_from_info({"max_running_requests": True}) is None  # a bool is not a count


def test_pipelined_state_groups_keep_three_groups_of_prefix_states_beside_two_steps():
    """lead 2 (two request steps in flight): a group's prefix states wait two steps for their branches, so
    3 groups of prefix states and 2 steps of running requests (≤ the running cap) must fit the slots. The
    batch-job engine of run 5b (807 slots, 3 a request, ≤ 269 running), W3-like rows: 29 rows a group,
    against 60 with one step in flight."""
    b = StateBudget(slots=807, per_request=3, max_running=269)
    w3 = [row(i, [i] * 50, n_q=3) for i in range(300)]
    groups = state_groups(w3, b, overlap=True, lead=2)
    sizes = [y - x for x, y in groups]
    assert max(sizes) == 29 and sum(sizes) == 300  # 3·29 + 3·min(2·4·29, 269) = 87 + 696 = 783 ≤ 791
    assert b.pipelined_cost(29, 87, 2) <= b.usable() < b.pipelined_cost(30, 90, 2)
    one = state_groups(w3, b, overlap=True)
    assert max(y - x for x, y in one) > 2 * 29  # one step in flight: twice as large, half the steps
    # the running cap bounds the running part: beyond it, requests wait in the queue holding no slot
    assert b.pipelined_cost(100, 300, 2) == 3 * 100 + 3 * 269
    assert state_groups(w3, b, overlap=True, lead=1) == one  # lead 1 is the one-step schedule


def test_pipelined_state_groups_keep_both_steps_within_the_running_cap():
    """With one slot a request (sglang's `no_buffer` strategy, read back from the engine) the slots alone
    would allow groups of 174 W3 rows (3·174 + 269 ≤ 791): two steps of 696 requests against a cap of 269,
    and on the H200 (run 9) ~267 prefix-hit requests met in one batch and the engine died of a CUDA OOM
    copying their cached states. Both steps in flight must fit the running cap: 2 · 4 · 33 = 264 ≤ 269."""
    b = StateBudget(slots=807, per_request=1, max_running=269)
    w3 = [row(i, [i] * 50, n_q=3) for i in range(300)]
    sizes = [y - x for x, y in state_groups(w3, b, overlap=True, lead=2)]
    assert max(sizes) == 33 and sum(sizes) == 300
    uncapped = StateBudget(slots=807, per_request=1)  # no cap known: the slots alone decide
    assert max(y - x for x, y in state_groups(w3, uncapped, overlap=True, lead=2)) > 33


def _schedule_peaks(rows, groups, lead, budget):
    """The pipelined schedule as prefix_first sends it (step j: group j-lead's branches, group j's prefix-only
    requests; `lead` steps in flight), every window of steps, the tail included: (most requests running, most
    slots held), counted as `StateBudget.steps_fit` counts them."""
    pr = [(prefix_runs(rows, a, b), sum(len(r.branches) for r in rows[a:b])) for a, b in groups]
    n = len(pr)
    P = lambda j: pr[j][0] if 0 <= j < n else 0  # noqa: E731
    R = lambda j: pr[j][1] if 0 <= j < n else 0  # noqa: E731
    peak_run = peak_slots = 0
    for k in range(n + lead):
        running = sum(R(j - lead) + P(j) for j in range(k - lead + 1, k + 1))
        cached = sum(P(j) for j in range(k - lead, k + 1))
        peak_run = max(peak_run, running)
        peak_slots = max(peak_slots, cached + budget.per_request * min(running, budget.max_running or running))
    return peak_run, peak_slots


def test_prefix_first_never_collapses_to_one_prefix_a_group_where_state_slots_are_few():
    """Issue 38.3, the arithmetic of an 80 GB card (docs/benchmarks.md: bf16 35B-A3B weights leave about 64-85
    state slots at 5 a running request, ≤ 13-17 running; not measured on a GPU): two steps in flight keep three
    groups of prefix states beside two steps of requests, so each W3 group is one ticket (one row a forward);
    one step in flight takes 2-3 tickets a group, and the schedule takes it. Where the slots are many (the
    H200's batch-job engines) the asked two steps stand, as measured."""
    w3 = [row(i, [i] * 50, n_q=3) for i in range(300)]
    for slots, cap in ((64, 12), (80, 16), (85, 17)):
        b = StateBudget(slots=slots, per_request=5, max_running=cap)
        assert max(y - x for x, y in state_groups(w3, b, overlap=True, lead=2)) == 1  # the collapse
        assert steps_in_flight(w3, b, 2) == 1
        assert min(y - x for x, y in state_groups(w3, b, overlap=True, lead=1)[:-1]) >= 2
    for b in (StateBudget(slots=807, per_request=3, max_running=269), StateBudget(807, 5, 161), H200_35B):
        assert steps_in_flight(w3, b, 2) == 2
    assert steps_in_flight(w3, StateBudget(80, 5, 16), 1) == 1  # --pipeline-depth 1 is kept
    # rows too large for two a group even at one step (8 questions: 40 slots a row at 5): the asked lead
    w1 = [row(i, [i] * 50, n_q=8) for i in range(64)]
    assert steps_in_flight(w1, StateBudget(80, 5, 16), 2) == 2
    assert steps_in_flight(w3[:1], StateBudget(80, 5, 16), 2) == 2  # one prefix: nothing to group


def test_the_pipelined_schedule_as_sent_never_runs_more_than_the_engine_holds():
    """Groups of different sizes (8-question rows, then 1-question rows, then 3): every window of `lead` steps
    as prefix_first sends them stays within the engine's running cap and its usable state slots, counted from
    the groups as they are (the budget's own formula assumes all groups the size of the one being cut)."""
    mixed = (
        [row(i, [i] * 50, n_q=8) for i in range(20)]
        + [row(100 + i, [100 + i] * 50, n_q=1) for i in range(60)]
        + [row(200 + i, [200 + i] * 50, n_q=3) for i in range(40)]
    )
    small = StateBudget(80, 5, 16)  # an 80 GB card's: an 8-question row alone is 2 · 9 > 16 at two steps
    for b in (StateBudget(207, 3, 69), StateBudget(807, 5, 161), StateBudget(807, 1, 269), small):
        rows = mixed[20:] if b is small else mixed  # a prefix run too large for the budget runs as one group
        for lead in (2, 3):
            groups = state_groups(rows, b, overlap=True, lead=lead)
            assert [i for a, c in groups for i in range(a, c)] == list(range(len(rows)))
            running, slots = _schedule_peaks(rows, groups, lead, b)
            assert running <= b.max_running and slots <= b.usable(), (b, lead, running, slots)
