"""The local runner: one backend in this process (loaded for the job, or held open by the caller: tests,
eval, the Python API's Classifier), the host stage of chunk k+1 running while chunk k is on the engine."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ...backends import SPECS, Backend, load_backend, tokenizer_name
from ...checkpoint.info import model_info
from ...readouts.base import Readout
from ..prefill import FailureTracker
from ..progress import Progress
from ..stages import prompt_chunk, score_chunk
from ..summary import Summary, describe_model
from .streams import OnProgress, Scored, Todo

if TYPE_CHECKING:
    from ...config import RunConfig


class LocalRunner:
    """`backend`: a started backend, kept open (the job applies its request options to it); None loads one
    for each job from the config and closes it after. `prompter`: one built at start-up for this backend
    (the Python API's, its labels verified once), else built per job."""

    summary_type = Summary  # what the loop builds from describe() (the Ray runner adds its own facts)

    def __init__(self, backend: Backend | None = None, prompter: Any = None):
        self.backend, self.own, self.held_prompter = backend, backend is None, prompter

    @property
    def labels(self) -> tuple[str, ...] | None:
        return None if self.backend is None else getattr(self.backend, "labels", None)

    @property
    def name(self) -> str:
        return self._started().name

    def _started(self) -> Backend:
        """The backend: given, or loaded by `open` (the loop asks nothing else of a runner before it opens)."""
        assert self.backend is not None, "LocalRunner: open() loads the backend"
        return self.backend

    @contextlib.contextmanager
    def open(self, cfg: RunConfig, readout: Readout):
        if self.own:
            self.backend = load_backend(cfg.backend, cfg.backend_options(cfg.model), readout.backend_kind)
        else:
            self._started().configure(
                cfg
            )  # this job's request options (--request-pattern, …) on a started backend
        try:
            b = self._started()
            # Branches longer than the model's (sglang: the engine's) limit are refused in the prompt stage,
            # before any model call.
            self.prompter = self.held_prompter or readout.prompter(b.tokenizer, b.context_length)
            self.tokenizer_name = tokenizer_name(b.tokenizer)
            self.readout, self.cfg = readout, cfg
            self.budget = cfg.kv_budget_tokens or b.kv_budget_tokens()
            yield self
        finally:
            if self.own:
                self._started().close()

    def describe(self) -> dict[str, Any]:
        """The Summary's backend facts: the backend and its device, the model's kind, the request pattern,
        the start-up it ran here."""
        b, cfg = self.backend, self.cfg
        return {
            "backend": f"{cfg.backend} on {SPECS[cfg.backend].device(cfg)}",
            "model": describe_model(getattr(b, "model_info", None) or model_info(self.cfg.model)),
            "tokenizer": self.tokenizer_name,
            "pattern": getattr(b, "pattern", ""),
            "startup": getattr(b, "startup", "") if self.own else "",
        }

    def score(self, todo: Todo, tracker: FailureTracker, progress: Progress | None = None,
              on_progress: OnProgress | None = None) -> Scored:  # fmt: skip
        """Score each chunk of `todo` in order. The host stage (reading the next chunk from `todo` and
        rendering + tokenizing it) runs in a thread while this chunk is on the engine (the tokenizer's
        batch calls release the GIL). Only that thread pulls `todo` and uses the prompter; each chunk is
        planned and prefilled exactly as without it, so the output is the same."""
        b = self._started()

        def host():
            item = next(todo, None)
            return None if item is None else (*item, prompt_chunk(item[1], self.prompter))

        pool = ThreadPoolExecutor(1, thread_name_prefix="openjev-host")
        try:
            pending = pool.submit(host)
            while (item := pending.result()) is not None:
                pending = pool.submit(host)
                i, _, prompted = item
                warm0 = b.warm_tokens
                scored = score_chunk(
                    prompted, self.readout, b, self.budget, self.cfg.max_branches,
                    on_progress, tracker, progress,
                )  # fmt: skip
                yield (
                    i,
                    scored.records,
                    {
                        "warm_tokens": b.warm_tokens - warm0,
                        "unique_tokens": scored.unique_tokens,
                    },
                )
        finally:
            # Wait for a host step still reading: the loop closes `todo` (and then the store) when this
            # returns, and a generator cannot be closed while this thread runs it ("generator already
            # executing", CI on fa92eeb), nor may it write the ledger after the store closed. A step is
            # one chunk's read and tokenization, so this waits at most that long.
            pool.shutdown(wait=True, cancel_futures=True)
