"""The engine side of the server: one engine and one readout held open (an `api.Classifier`: the model
loaded once, its labels verified once), requests gathered into batches and run through the job's own stage
functions, as the local runner and the Ray actors run a chunk (pipeline/stages.py):

    request (app.py, the event loop) ──Pending──▶ host thread: `prompt_chunk` over every request waiting (one
    batched tokenization), the token limits checked (a request over one is answered 422 here, before any
    model call) ──▶ main thread: `score_chunk` over every prompted request waiting (plan → prefill → read out:
    the planner sorts and windows them together, so requests in flight at once reach the engine together and
    share its radix cache and request pattern) ──▶ each request's records, in its questions' order.

The prefill runs in the main thread, as in `run`: the sglang backend's engine-death signal (SIGQUIT →
EngineDied) is raised where the main thread waits on the engine, and an idle engine is checked every IDLE_CHECK_S. One FailureTracker spans the server's life,
as one spans a job: a backend that fails the same way on three requests alone is broken, and the server ends.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ..core import RowPrompt
from ..errors import BackendError
from ..pipeline.prefill import FailureTracker
from ..pipeline.stages import Prompted, prompt_chunk, score_chunk
from ..readouts.base import RequestReader
from .limits import HTTPError, Limits

STOP = object()  # ends the host thread
# An idle engine is asked whether it lives this often (`Backend.check_alive`: sglang's sees a failed engine
# process, else sends a one-token request; hf's runs in this process and has nothing to check).
IDLE_CHECK_S = 2.0


@dataclass
class Pending:
    """One request on its way: its row (its `pos` unique in the server's life: the stages key results by it),
    where its answer goes (`future`, on `loop`), and what it measured."""

    row: Any  # the served readout's row
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    t_in: float = field(default_factory=time.perf_counter)
    prompt: RowPrompt | None = None
    timing: dict[str, float] = field(default_factory=dict)

    def answer(self, value: Any) -> None:
        """Hand `value` (a result or an HTTPError) to the request's handler, unless it gave up (timeout)."""

        def put() -> None:
            if not self.future.done():
                self.future.set_result(value)

        try:
            self.loop.call_soon_threadsafe(put)
        except RuntimeError:  # the event loop has closed: nobody waits any more
            pass


@dataclass(frozen=True)
class Answer:
    """A request's records (the readout's output columns, as `run` writes them) and its token counts."""

    records: list[dict[str, Any]]
    prefix_tokens: int
    timing: dict[str, float]


class Service:
    """`held`: a Classifier's parts held open (`Classifier.held`: config, prompter, backend); `reader`: the
    served readout's request reader, whose `readout` the answers' records are (records and errors come from
    each row's own questions) and whose `check` holds a prompted row to the server's token `limits`."""

    def __init__(self, held: Any, reader: RequestReader, limits: Limits):
        self.reader, self.readout, self.limits = reader, reader.readout, limits
        self.backend = held.backend
        self.prompter = held.prompter  # built and label-checked once, at start-up
        self.budget = held.cfg.kv_budget_tokens or self.backend.kv_budget_tokens()
        self.max_branches = held.cfg.max_branches
        self.tracker = FailureTracker(self.backend.name)
        self._pos = itertools.count()
        self._prompt_q: queue.Queue = queue.Queue()
        self._score_q: queue.Queue = queue.Queue()
        self._host = threading.Thread(target=self._host_loop, name="openjev-serve-host", daemon=True)
        self._checked = time.perf_counter()
        self._ready: list[Pending] = []  # prompted, not yet in a batch (past --max-batch)
        self.batches = 0  # batches scored (GET /health reports it)
        self.dead: str | None = None  # why the engine stopped serving

    def start(self) -> None:
        self._host.start()

    def submit(self, row: Any, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """Queue `row` (from the event loop's thread); the future gets an Answer or an HTTPError."""
        fut = loop.create_future()
        if self.dead is not None:
            fut.set_result(HTTPError(503, f"the engine has stopped: {self.dead}"))
            return fut
        self._prompt_q.put(Pending(replace(row, pos=next(self._pos)), fut, loop))
        return fut

    # -- host thread: the prompt stage ------------------------------------------------------------------
    def _gather(self, q: queue.Queue, first: Any, wait_ms: float = 0.0) -> list:
        """`first` and everything else waiting in `q`, after letting `wait_ms` pass for more (requests sent
        together arrive a few hundred microseconds apart)."""
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

    def _host_loop(self) -> None:
        while (first := self._prompt_q.get()) is not STOP:
            batch = self._gather(self._prompt_q, first)
            t0 = time.perf_counter()
            try:
                prompted = prompt_chunk([p.row for p in batch], self.prompter)
            except Exception as e:  # noqa: BLE001 - a tokenizer fault answers these requests, not the server
                for p in batch:
                    p.answer(HTTPError(500, f"prompt preparation failed: {type(e).__name__}: {e}"))
                continue
            dt = time.perf_counter() - t0
            by_pos = {rp.pos: rp for rp in prompted.prompts}
            ok = []
            for p in batch:
                p.timing["prep"] = dt
                failed = prompted.failed.get(p.row.pos)
                if failed:  # a branch or the row over the readout's token limits: nothing reaches the model
                    why = self.reader.refused(p.row, next(iter(failed.values())))
                    p.answer(HTTPError(422, why.message, why.field))
                    continue
                rp = by_pos[p.row.pos]
                # the server's token limits (at most the readout's own, which the prompter applied)
                if (err := self.reader.check(p.row, rp, self.limits.counts())) is not None:
                    p.answer(HTTPError(422, err.message, err.field))
                    continue
                p.prompt = rp
                ok.append(p)
            if ok:
                self._score_q.put(ok)

    # -- main thread: plan → prefill → read out ------------------------------------------------------------
    def serve_until(self, done) -> None:
        """Score batches until `done()` says the HTTP side has stopped and nothing is queued. An idle engine is
        checked every IDLE_CHECK_S, so a dead one ends the server without a request. Raises
        BackendError when the engine dies or the backend is broken (the requests waiting are answered 503)."""
        try:
            while True:
                if not self._ready:
                    try:
                        first = self._score_q.get(timeout=0.5)
                    except queue.Empty:
                        if done() and self._prompt_q.empty():
                            return
                        if time.perf_counter() - self._checked >= IDLE_CHECK_S:
                            self.backend.check_alive()  # an idle engine's death ends the server, no request needed
                            self._checked = time.perf_counter()
                        continue
                    # every prompted request waiting joins the batch, and those that come within batch_wait_ms
                    # (the prompt stage answers the ones over a limit at once: it does not wait)
                    parts = self._gather(self._score_q, first, self.limits.batch_wait_ms)
                else:  # left from the last batch (--max-batch): with whatever came meanwhile, no wait
                    parts = self._gather(self._score_q, [])
                self._ready += [p for part in parts for p in part]
                n = self.limits.max_batch or len(self._ready)
                batch, self._ready = self._ready[:n], self._ready[n:]
                self._score(batch)
        except BackendError as e:
            self._fail_all(str(e))
            raise
        finally:
            self._prompt_q.put(STOP)

    def _score(self, batch: list[Pending]) -> None:
        batch = [p for p in batch if not p.future.done()]  # a request its handler gave up on (504) is not run
        if not batch:
            return
        rows = [p.row for p in batch]
        prompts = [cast(RowPrompt, p.prompt) for p in batch]  # set before a request is queued to score
        t0 = time.perf_counter()
        try:
            scored = score_chunk(Prompted(rows, prompts, {}), self.readout, self.backend, self.budget,
                                 self.max_branches, tracker=self.tracker)  # fmt: skip
        except BackendError as e:
            for p in batch:
                p.answer(HTTPError(503, f"the engine has stopped: {e}"))
            raise
        except Exception as e:  # noqa: BLE001 - a fault of this batch, not of the server
            for p in batch:
                p.answer(HTTPError(500, f"{type(e).__name__}: {e}"))
            return
        self.batches += 1
        self._checked = time.perf_counter()  # the engine just answered
        engine = self._checked - t0
        shared = _prefix_share(prompts)
        at = 0
        for p, prompt in zip(batch, prompts, strict=True):
            n = self.readout.n_records(p.row)
            recs = scored.records[at : at + n]
            at += n
            p.timing.update(queue=max(t0 - p.t_in - p.timing.get("prep", 0.0), 0.0), prefill=engine * shared,
                            branches=engine * (1 - shared))  # fmt: skip
            p.answer(Answer(recs, len(prompt.prefix), dict(p.timing)))

    def _fail_all(self, why: str) -> None:
        self.dead = why
        for p in self._ready:
            p.answer(HTTPError(503, f"the engine has stopped: {why}"))
        self._ready = []
        for q in (self._prompt_q, self._score_q):
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                for p in item if isinstance(item, list) else [item]:
                    if isinstance(p, Pending):
                        p.answer(HTTPError(503, f"the engine has stopped: {why}"))


def _prefix_share(prompts: list[RowPrompt]) -> float:
    """The share of a batch's computed tokens that are shared prefix (each distinct prefix once): the part of the
    batch's engine time Server-Timing reports as shared prefill (the backends time no phase apart)."""
    prefix = sum(len(p) for p in {rp.prefix for rp in prompts})
    suffix = sum(len(b.suffix) for rp in prompts for b in rp.branches)
    return prefix / (prefix + suffix) if prefix + suffix else 0.0
