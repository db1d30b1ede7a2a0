"""serve's batch budget (serve/batching.py): the queue's head, as many requests as the engine computes within
the time budget at its measured speed, at least one (issue 46: a batch of every request waiting made each wait
for all of them)."""

from openjev_batch.core import BranchSpec, RowPrompt
from openjev_batch.serve.batching import DEFAULT_BATCH_MS, OTHER_BATCH_MS, BatchBudget, request_tokens


def test_nothing_measured_takes_one_request_then_the_budget_decides():
    b = BatchBudget("hf", batch_ms=100)
    assert b.cut([]) == 0
    assert b.cut([50, 50, 50]) == 1  # the first batch measures the engine
    b.observe(tokens=1000, seconds=0.5)  # 0.5 ms a token: 100 ms holds 200 tokens
    assert b.s_per_token == 0.0005
    assert b.cut([50, 50, 50, 50, 50]) == 4
    assert b.cut([150, 60, 10]) == 1  # the head of the queue, in order: no later request jumps ahead
    assert b.cut([5000, 10]) == 1  # a request over the budget runs alone, never waits for ever


def test_the_speed_follows_the_engine_smoothed():
    b = BatchBudget("hf", batch_ms=100)
    b.observe(1000, 0.5)
    b.observe(1000, 1.5)  # the shared CPU got slower: the estimate moves 30 % of the way
    assert abs(b.s_per_token - 0.0008) < 1e-12
    b.observe(0, 1.0)  # an empty batch says nothing
    assert abs(b.s_per_token - 0.0008) < 1e-12
    assert b.cut([100] * 10) == 1


def test_max_batch_caps_the_count_and_each_backend_has_its_budget():
    b = BatchBudget("sglang", max_batch=3)
    assert b.ms == DEFAULT_BATCH_MS["sglang"] == 2000
    b.observe(1000, 0.001)
    assert b.cut([10] * 10) == 3
    assert BatchBudget("hf").ms == 250 and BatchBudget("other").ms == OTHER_BATCH_MS


def test_a_request_counts_its_prefix_once_and_every_suffix():
    rp = RowPrompt(0, "r", (1, 2, 3), (BranchSpec("q1", (4, 5), (9,)), BranchSpec("q2", (6,), (9,))))
    assert request_tokens(rp) == 6


def test_the_backlog_is_the_requests_at_their_measured_engine_time():
    """What `serve` foresees before admitting a request: the queue ahead and the request itself at the engine's
    measured seconds a request; past --timeout it answers 529 now rather than 504 after the timeout."""
    b = BatchBudget("hf")
    assert b.backlog_s(50) == 0.0  # nothing measured: nothing foreseen, nothing refused
    b.observe(tokens=900, seconds=6.0, requests=3)
    assert b.s_per_request == 2.0 and b.backlog_s(61) == 122.0


def test_a_queue_past_half_the_timeout_is_a_504_foreseen():
    b = BatchBudget("hf")
    assert b.too_busy(1000, 120.0) is None  # nothing measured: nothing refused
    b.observe(tokens=500, seconds=5.0, requests=1)
    assert b.too_busy(12, 120.0) is None  # 60 s: half the timeout
    assert b.too_busy(13, 120.0) == (65.0, 5)  # retry in a request's engine time (5 s), when a slot frees
    assert b.too_busy(40, 120.0) == (200.0, 140)
