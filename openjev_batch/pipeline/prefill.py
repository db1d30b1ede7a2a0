"""Prefill with fault isolation: a failing window is retried on its halves down to single rows (row errors),
and a backend that fails the same way on several rows alone is broken itself (the job ends)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ..backends import Backend, BranchResult
from ..core import Window
from ..errors import BackendError

# A backend that fails the same way on this many rows, each run alone, with no successful call between them
# (three different prefixes, so not one repeated conversation), is broken itself (an API mismatch, a missing
# kernel, a dead engine): the job ends (exit 4) instead of writing every row as an error. Three keeps the
# cost low (a window of R rows reaches its first single row after log2(R) calls) while two bad rows in a
# row stay row errors.
BROKEN_AFTER_ROWS = 3


def _signature(e: BaseException) -> str:
    """An exception's type and message with numbers masked: the same fault on different rows differs only
    in sizes and positions (`crop with a positive value (64)` vs `(71)`)."""
    return f"{type(e).__name__}: {re.sub(r'[0-9]+', '#', str(e))}"


class FailureTracker:
    """Tells a broken backend from bad rows across a job's windows (see BROKEN_AFTER_ROWS)."""

    def __init__(self, backend_name: str, partial: str | None = None, kept: Callable[[], bool] | None = None):
        """`partial`: the job's partial output folder; `kept()`: whether it holds a finished chunk now (the
        message offers --resume only then: a backend broken from the first window leaves none)."""
        self.backend_name = backend_name
        self.partial = partial
        self.kept = kept or (lambda: False)
        # (prefix, signature, message) of the single-row failures since the last successful call; text
        # only: an exception's traceback holds the failed call's frames (and on a GPU their tensors)
        self.streak: list[tuple[tuple[int, ...], str, str]] = []

    def succeeded(self) -> None:
        self.streak.clear()

    def row_failed(self, prefix: tuple[int, ...], e: BaseException) -> None:
        sig = _signature(e)
        if self.streak and self.streak[-1][1] != sig:
            self.streak.clear()
        self.streak.append((prefix, sig, f"{type(e).__name__}: {str(e)[:500]}"))
        if len({p for p, _, _ in self.streak}) >= BROKEN_AFTER_ROWS:
            raise BackendError(
                f"the {self.backend_name} backend failed the same way on {len(self.streak)} rows in a row, "
                f"each run alone, with no call succeeding between them, so the backend itself is broken, "
                f"not the rows: {self.streak[0][2]}{self.resume_hint()}"
            )

    def resume_hint(self) -> str:
        if self.partial and self.kept():
            return f" (finished chunks are kept in {self.partial}: rerun with --resume)"
        return ""


def prefill_window(
    backend: Backend, window: Window, tracker: FailureTracker | None = None
) -> list[list[BranchResult]]:
    """`backend.prefill` with fault isolation: an engine error or out-of-memory on a window is retried on
    its two halves, down to single rows; a row that still fails gets the error on each of its branches.
    A dead engine (BackendError from `backend.check_alive()`) ends the job, and so does a backend that fails
    the same way on several rows alone with nothing succeeding between (`FailureTracker`)."""
    tracker = tracker or FailureTracker(backend.name)
    try:
        out = backend.prefill(window)
    except Exception as e:  # torch's OutOfMemoryError is a RuntimeError; API mismatches are any type
        backend.check_alive()
        if len(window.rows) == 1:
            r = window.rows[0]
            tracker.row_failed(r.prefix, e)
            msg = f"{type(e).__name__}: {e}"[:500]
            return [
                [
                    BranchResult((math.nan,) * len(b.label_ids), len(r.prefix) + len(b.suffix), 0, msg)
                    for b in r.branches
                ]
            ]
        return [res for half in window.halves() for res in prefill_window(backend, half, tracker)]
    tracker.succeeded()
    return out
