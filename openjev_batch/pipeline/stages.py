"""The stage functions the local runner (runners/local.py) and the Ray actors (runners/ray/) both call: the
prompt stage of a chunk, and its plan → prefill → read-out stage."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import interrupts
from ..backends import Backend, BranchResult
from ..core import RowError, RowPrompt
from ..readouts.base import Readout
from .plan import plan
from .prefill import FailureTracker, prefill_window
from .progress import Progress, WindowReports


@dataclass(frozen=True)
class Prompted:
    """A chunk after the prompt stage: its rows (parsed rows and RowErrors, input order), the prompts of
    the rows that have something to prefill, and per row position the questions that failed (qid → error)."""

    rows: list
    prompts: list[RowPrompt]
    failed: dict[int, dict[str, str]]


@dataclass(frozen=True)
class Scored:
    """A chunk after prefill and read-out: its output records (input order) and the planner's unique
    tokens of its answered branches."""

    records: list[dict[str, Any]]
    unique_tokens: int


def prompt_chunk(rows: list, prompter) -> Prompted:
    """Prompt stage of a chunk: render + tokenize every parsed row (`prompter.build_many`)."""
    good = [r for r in rows if not isinstance(r, RowError)]
    prompts, failed = [], {}
    for row, (rp, fails) in zip(good, prompter.build_many(good), strict=True):
        if rp is not None:
            prompts.append(rp)
        if fails:
            failed[row.pos] = {f.qid: f.error for f in fails}
    return Prompted(rows, prompts, failed)


def score_chunk(
    chunk: Prompted,
    readout: Readout,
    backend: Backend,
    budget: int,
    max_branches: int,
    on_progress: Callable[[int, int], None] | None = None,
    tracker: FailureTracker | None = None,
    progress: Progress | None = None,
) -> Scored:
    """Plan → prefill (with fault isolation) → read out, for one prompted chunk. `on_progress(branches,
    tokens)` after each window; `progress` as branches finish within a window (the backend's reports) and
    for the rows that never reach one; `tracker` carries the broken-backend evidence across chunks (a fresh
    one per call if not given)."""
    tracker = tracker or FailureTracker(backend.name)
    results: dict[int, dict[str, tuple[int, BranchResult]]] = {}
    unique = rows_run = branches_run = 0
    for window in plan(chunk.prompts, budget, max_branches):
        reports = WindowReports(window, backend, progress) if progress is not None else None
        backend.on_branches = reports
        try:
            outs = prefill_window(backend, window, tracker)
        finally:
            backend.on_branches = None
        if reports is not None:
            reports.finish(window, outs)
            rows_run, branches_run = rows_run + len(window.rows), branches_run + window.n_branches
        for rp, new, res in zip(window.rows, window.new_prefix_tokens, outs, strict=True):
            results[rp.pos] = {b.qid: (len(rp.prefix), r) for b, r in zip(rp.branches, res, strict=True)}
            ok = [len(b.suffix) for b, r in zip(rp.branches, res, strict=True) if r.error is None]
            unique += new + sum(ok) if ok else 0
        if on_progress:
            on_progress(window.n_branches, window.logical_tokens)
        interrupts.check()  # a SIGINT/SIGTERM that a library swallowed still stops the job here
    records = []
    for row in chunk.rows:
        if isinstance(row, RowError):
            records.extend(readout.error_records(row))
        else:
            records.extend(readout.records(row, results.get(row.pos, {}), chunk.failed.get(row.pos, {})))
    if progress is not None:
        progress.settled(len(chunk.rows) - rows_run, len(records) - branches_run)
    return Scored(records, unique)
