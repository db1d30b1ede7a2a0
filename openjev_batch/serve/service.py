"""The engine side of the server: one engine and one readout held open (an `api.Classifier`: the model
loaded once, its labels verified once), requests queued in the order they come and run in batches through the
job's own stage functions, as the local runner and the Ray actors run a chunk (pipeline/stages.py):

    request (app.py, the event loop; parsed before it is admitted: `evaluate`) ──Pending──▶ host thread:
    `prompt_chunk` over every request waiting (one batched tokenization), the token limits checked (a request
    over one is answered 422 here, before any model call) ──▶ main thread: the queue's head, as much as the
    engine computes within its time budget (batching.BatchBudget), through `score_chunk` (plan → prefill →
    read out: the planner sorts and windows them together, so they share the radix cache and request pattern)
    ──▶ each request of the batch answered as the batch ends, while the rest of the queue waits its turn.

A request waits for its own work and the queue ahead of it, not for every request in flight. A request whose
handler gave up (504, or its client left) is dropped from the queue, never computed.

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

from ..backends import SPECS
from ..core import RowPrompt
from ..errors import BackendError
from ..pipeline.prefill import FailureTracker
from ..pipeline.stages import Prompted, prompt_chunk, score_chunk
from ..readouts.base import RequestReader
from .batching import STOP, Ahead, BatchBudget, gather, prefix_share, request_tokens
from .limits import HTTPError, Limits

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
        self._ready: list[Pending] = []  # prompted, not yet in a batch: the queue, in the order requests came
        self.cut = BatchBudget(SPECS[self.backend.name].serve_batch_ms, limits.batch_ms, limits.max_batch)
        self.ahead = Ahead()  # the tokens of the requests tokenized and not yet answered: the admission forecast's
        self.batches = 0  # batches scored (GET /health reports it)
        self._dropped = [0, 0]  # given up before the prompt stage, before the engine (each thread its own count)
        self.in_flight = 0  # requests admitted and not yet answered (`evaluate`, on the event loop's thread)
        self.dead: str | None = None  # why the engine stopped serving

    @property
    def dropped(self) -> int:
        """Requests given up (504, the client gone) before the engine ran them: never computed."""
        return sum(self._dropped)

    def start(self) -> None:
        self._host.start()

    async def evaluate(self, row: Any, gone: Any = None) -> Answer:
        """`row`'s answer, on the event loop. Admission: past `--max-concurrent` requests in flight a 529 with
        Retry-After (the body was parsed before: a malformed one is a 422 however full the server is), and when
        the engine's measured speed says the queue ahead holds more than half of `--timeout` (a 504 foreseen:
        batching.BatchBudget.too_busy). Past `--timeout` a 504; `gone()` (None: not watched) makes an awaitable
        that ends when the client leaves (a 499 nobody reads). Either way the request is dropped from the queue:
        the engine never computes an answer nobody waits for. Raises HTTPError."""
        lim = self.limits
        if self.in_flight >= lim.max_concurrent:
            raise HTTPError(529, f"{lim.max_concurrent} in evaluation, the most requests this server takes at "
                            "once: retry", headers={"Retry-After": str(lim.retry_after_s)})  # fmt: skip
        tokens, sized = self.ahead.total()  # a 504 foreseen: the queue ahead, by its size
        if (busy := self.cut.too_busy(tokens, max(self.in_flight - sized, 0) + 1, lim.timeout_s)) is not None:
            ahead, wait = busy
            raise HTTPError(529, f"the requests in evaluation hold about {ahead:.0f} s of engine time, past what "
                            f"this server's {lim.timeout_s:g} s timeout allows: retry",
                            headers={"Retry-After": str(max(wait, lim.retry_after_s))})  # fmt: skip
        self.in_flight += 1
        fut = self.submit(row, asyncio.get_running_loop())
        watch = asyncio.ensure_future(gone()) if gone is not None else None
        try:
            done, _ = await asyncio.wait([fut] + ([watch] if watch else []), timeout=lim.timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            if fut not in done:
                fut.cancel()  # done: the scheduler drops it (`_drop_given_up`)
                if watch is not None and watch in done:
                    raise HTTPError(499, "the client closed its connection")  # nobody reads it
                raise HTTPError(504, f"no answer from the engine within {lim.timeout_s:g} s")
            got = fut.result()
        finally:
            self.in_flight -= 1
            if watch is not None:
                watch.cancel()
        if isinstance(got, HTTPError):
            raise got
        return got

    def submit(self, row: Any, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """Queue `row` (from the event loop's thread); the future gets an Answer or an HTTPError."""
        fut = loop.create_future()
        if self.dead is not None:
            fut.set_result(HTTPError(503, f"the engine has stopped: {self.dead}"))
            return fut
        self._prompt_q.put(Pending(replace(row, pos=next(self._pos)), fut, loop))
        return fut

    # -- host thread: the prompt stage ------------------------------------------------------------------
    def _host_loop(self) -> None:
        while (first := self._prompt_q.get()) is not STOP:
            came = gather(self._prompt_q, first)
            batch = [p for p in came if not p.future.done()]  # given up already: not even tokenized
            self._dropped[0] += len(came) - len(batch)
            if not batch:
                continue
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
                self.ahead.add(p.row.pos, request_tokens(rp))
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
                    parts = gather(self._score_q, first, self.limits.batch_wait_ms)
                else:  # the queue's rest: with whatever came meanwhile, no wait
                    parts = gather(self._score_q, [])
                self._ready += [p for part in parts for p in part]
                self._drop_given_up()
                n = self.cut.cut([request_tokens(p.prompt) if p.prompt else 0 for p in self._ready])
                batch, self._ready = self._ready[:n], self._ready[n:]
                self._score(batch)
        except BackendError as e:
            self._fail_all(str(e))
            raise
        finally:
            self._prompt_q.put(STOP)

    def _drop_given_up(self) -> None:
        """Take the requests whose handler gave up (504, the client gone) out of the queue: never computed."""
        keep = [p for p in self._ready if not p.future.done()]
        self.ahead.remove([p.row.pos for p in self._ready if p.future.done()])
        self._dropped[1] += len(self._ready) - len(keep)
        self._ready = keep

    def _score(self, batch: list[Pending]) -> None:
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
        finally:  # the batch leaves the queue ahead, answered or failed
            self.ahead.remove([p.row.pos for p in batch])
        self.batches += 1
        self._checked = time.perf_counter()  # the engine just answered
        engine = self._checked - t0
        self.cut.observe(sum(request_tokens(rp) for rp in prompts), engine, len(batch))
        shared = prefix_share(prompts)
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
        self.ahead.clear()
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


