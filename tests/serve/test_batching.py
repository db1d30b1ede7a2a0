"""serve's batch budget (serve/batching.py): the queue's head, as many requests as the engine computes within
the time budget at its measured speed, at least one (issue 46: a batch of every request waiting made each wait
for all of them)."""

from openjev_batch.backends import SPECS
from openjev_batch.backends.base import BackendSpec
from openjev_batch.core import BranchSpec, RowPrompt
from openjev_batch.serve.batching import BatchBudget, request_tokens


def test_nothing_measured_takes_one_request_then_the_budget_decides():
    b = BatchBudget(SPECS["hf"].serve_batch_ms, batch_ms=100)
    assert b.cut([]) == 0
    assert b.cut([50, 50, 50]) == 1  # the first batch measures the engine
    b.observe(tokens=1000, seconds=0.5)  # 0.5 ms a token: 100 ms holds 200 tokens
    assert b.s_per_token == 0.0005
    assert b.cut([50, 50, 50, 50, 50]) == 4
    assert b.cut([150, 60, 10]) == 1  # the head of the queue, in order: no later request jumps ahead
    assert b.cut([5000, 10]) == 1  # a request over the budget runs alone, never waits for ever


def test_the_speed_follows_the_engine_smoothed():
    b = BatchBudget(SPECS["hf"].serve_batch_ms, batch_ms=100)
    b.observe(1000, 0.5)
    b.observe(1000, 1.5)  # the shared CPU got slower: the estimate moves 30 % of the way
    assert abs(b.s_per_token - 0.0008) < 1e-12
    b.observe(0, 1.0)  # an empty batch says nothing
    assert abs(b.s_per_token - 0.0008) < 1e-12
    assert b.cut([100] * 10) == 1


def test_max_batch_caps_the_count_and_each_backend_has_its_budget():
    b = BatchBudget(SPECS["sglang"].serve_batch_ms, max_batch=3)
    assert b.ms == 2000
    b.observe(1000, 0.001)
    assert b.cut([10] * 10) == 3
    assert BatchBudget(SPECS["hf"].serve_batch_ms).ms == 250 and BatchBudget(BackendSpec.serve_batch_ms).ms == 1000


def test_a_request_counts_its_prefix_once_and_every_suffix():
    rp = RowPrompt(0, "r", (1, 2, 3), (BranchSpec("q1", (4, 5), (9,)), BranchSpec("q2", (6,), (9,))))
    assert request_tokens(rp) == 6


def test_a_queue_past_most_of_the_timeout_is_a_504_foreseen():
    """What `serve` foresees before admitting a request: the queue ahead (tokenized requests by their tokens, the
    others and this one at the typical request size) at the measured seconds a token; past 80 % of --timeout
    it answers 529 now rather than 504 after the timeout."""
    b = BatchBudget(SPECS["hf"].serve_batch_ms)
    assert b.too_busy(10**6, 1000, 120.0) is None  # nothing measured: nothing refused
    b.observe(tokens=500, seconds=5.0, requests=1)  # 10 ms a token, 500 tokens a request: 5 s
    assert b.typical_tokens() == 500
    assert b.too_busy(0, 19, 120.0) is None  # 95 s: within 80 % of the timeout
    assert b.too_busy(0, 20, 120.0) == (100.0, 5)  # retry in a typical request's engine time (5 s)
    assert b.too_busy(5000, 10, 120.0) == (100.0, 5)  # 50 s tokenized + 10 × 5 s
    assert b.too_busy(0, 40, 120.0) == (200.0, 104)


def test_an_idle_server_admits_after_a_giant_request_and_small_ones_are_judged_by_their_size():
    """Hostile trial item 1: one 64 × 64 request (100k tokens, ~700 s of CPU) made every later request, even one
    alone on an idle server, a 529 for good: the forecast was requests × the giant's seconds a request."""
    b = BatchBudget(SPECS["hf"].serve_batch_ms)
    b.observe(tokens=100_000, seconds=700.0, requests=1)  # the giant: 7 ms a token
    assert b.too_busy(0, 1, 120.0) is None  # nothing ahead: an idle server never refuses
    assert b.too_busy(100_000, 1, 120.0) is not None  # behind the giant itself: a 504 foreseen
    b.observe(tokens=300, seconds=2.1, requests=1)  # a small one ran
    assert b.typical_tokens() == 300  # one giant does not make the typical request giant
    assert b.too_busy(300, 2, 120.0) is None  # a small request behind a small one: 6.3 s, admitted
    assert b.too_busy(0, 30, 120.0) is None  # 30 small requests untokenized: 63 s
    assert b.too_busy(0, 60, 120.0) is not None  # 60 of them: 126 s, past 96 s
