"""How much of the queue the engine's next batch takes (`BatchBudget`): the requests in the order they came, as
many as the engine computes within a time budget, at least one.

Why a budget and not "every request waiting": a request is answered when its batch ends, so a batch of every
request waiting made each wait for all of them. On the hf backend (2 CPU cores, busy) 20 concurrent ticket
requests went into one batch that outlived the 120 s timeout: 16 × 504, not one answered (issue 46). The hf
backend runs a label-logprob row by row (backends/hf/causal.py) and gains nothing from a wide batch, so a short
budget costs it no throughput; sglang gains from wide batches (its radix cache and batched prefill), so its
budget is longer. The engine's speed is measured, not assumed: seconds per input token, from the batches it
has run (the first batch takes one request, to measure).
"""

from __future__ import annotations

import collections
import math
import queue
import statistics
import threading
import time
from typing import Any

from ..core import RowPrompt

STOP = object()  # put in a queue: ends the host thread

SMOOTHING = 0.3  # the weight of the newest batch in the speed estimate (a shared CPU's speed drifts)
# The share of --timeout the queue ahead of a request may hold at the engine's measured speed: requests differ in
# size and a shared CPU's speed drifts. At the whole timeout 19 of 64 requests at 64 clients still got their 504; at
# half, 16 clients (~6 s a request) were turned away and retried, and the unluckiest waited the whole round
# (p99 195 s against 61 s p50): a client that retries loses its place in the queue (docs/serve-load.md).
ADMIT_SHARE = 0.8


def request_tokens(rp: RowPrompt) -> int:
    """The input tokens a request sends through the engine: its prefix and every branch's suffix."""
    return len(rp.prefix) + sum(len(b.suffix) for b in rp.branches)


class BatchBudget:
    """`default_ms`: the backend's own budget (BackendSpec.serve_batch_ms); `batch_ms`: --batch-ms (0: the default);
    `max_batch`: the most requests a batch takes (0: no count limit)."""

    def __init__(self, default_ms: float, batch_ms: float = 0.0, max_batch: int = 0) -> None:
        self.ms = batch_ms or default_ms
        self.max_batch = max_batch
        self.s_per_token: float | None = None  # measured: None until a batch has run
        self._sizes: collections.deque[float] = collections.deque(maxlen=32)  # recent batches' mean request tokens

    def cut(self, sizes: list[int]) -> int:
        """How many of the requests queued (their input tokens, `sizes`, in queue order) the next batch takes:
        the longest head of the queue whose estimated engine time fits the budget, at least one."""
        if not sizes:
            return 0
        cap = self.max_batch or len(sizes)
        if self.s_per_token is None:  # nothing measured yet: one request, which measures the engine
            return 1
        room = self.ms / 1000 / self.s_per_token  # tokens the budget holds
        n, used = 0, 0
        for size in sizes[:cap]:
            if n and used + size > room:
                break
            n, used = n + 1, used + size
        return n

    def observe(self, tokens: int, seconds: float, requests: int = 1) -> None:
        """A batch of `requests` requests, `tokens` input tokens, took `seconds` of engine time."""
        if tokens <= 0 or seconds <= 0 or requests <= 0:
            return
        self.s_per_token = _smooth(self.s_per_token, seconds / tokens)
        self._sizes.append(tokens / requests)

    def typical_tokens(self) -> float:
        """The input tokens of a typical request: the lower median of the recent batches' mean request size, so
        one giant request (64 questions × 64 options: minutes) does not make every later one look as big."""
        return statistics.median_low(self._sizes) if self._sizes else 0.0

    def too_busy(self, tokens_ahead: int, unsized: int, timeout_s: float) -> tuple[float, int] | None:
        """None when the queue ahead (`tokens_ahead`: the tokenized requests in evaluation, the batch on the
        engine included; `unsized`: those not yet tokenized and this one, each of the typical size) fits in
        ADMIT_SHARE of `timeout_s` at the measured seconds per token; else its engine seconds and the seconds after
        which to retry: a 504 foreseen, which a 529 now answers better than a 504 after `timeout_s` of waiting.
        Nothing ahead (an idle server, or only this request) is never refused: the forecast is of a queue."""
        if self.s_per_token is None or (tokens_ahead <= 0 and unsized <= 1):
            return None
        one = self.typical_tokens() * self.s_per_token
        ahead, room = tokens_ahead * self.s_per_token + unsized * one, timeout_s * ADMIT_SHARE
        if ahead <= room:
            return None
        # a slot frees about once a typical request's engine time
        return ahead, max(math.ceil(ahead - room), math.ceil(one))


class Ahead:
    """The input tokens of the requests tokenized and not yet answered (the host thread adds, the engine's
    thread removes, the event loop reads: a lock), by request position."""

    def __init__(self) -> None:
        self._tokens: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, pos: int, tokens: int) -> None:
        with self._lock:
            self._tokens[pos] = tokens

    def remove(self, positions: list[int]) -> None:
        with self._lock:
            for pos in positions:
                self._tokens.pop(pos, None)

    def clear(self) -> None:
        with self._lock:
            self._tokens.clear()

    def total(self) -> tuple[int, int]:
        """(their tokens, how many)."""
        with self._lock:
            return sum(self._tokens.values()), len(self._tokens)


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new


def gather(q: queue.Queue, first: Any, wait_ms: float = 0.0) -> list:
    """`first` and everything else waiting in `q`, after letting `wait_ms` pass for more (requests sent
    together arrive a few hundred microseconds apart). STOP ends the gathering and stays queued."""
    batch = [first]
    deadline = time.perf_counter() + wait_ms / 1000
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            left = deadline - time.perf_counter()
            if left <= 0:
                return batch
            try:
                item = q.get(timeout=left)
            except queue.Empty:
                return batch
        if item is STOP:
            q.put(STOP)  # seen by the next round
            return batch
        batch.append(item)


def prefix_share(prompts: list[RowPrompt]) -> float:
    """The share of a batch's computed tokens that are shared prefix (each distinct prefix once): the part of the
    batch's engine time Server-Timing reports as shared prefill (the backends time no phase apart)."""
    prefix = sum(len(p) for p in {rp.prefix for rp in prompts})
    suffix = sum(len(b.suffix) for rp in prompts for b in rp.branches)
    return prefix / (prefix + suffix) if prefix + suffix else 0.0
