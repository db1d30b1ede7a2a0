"""Live progress of a running job: what a display shows while it runs (rows and output records done against
the total, tokens/s, cache hit rate, ETA).

Why its own object and not the per-window `on_progress(branches, tokens)` callback: a window can hold a whole
job (a 200-question eval is one window of 200 branches), so a count that moves once per window says "0" for
the whole run and then jumps to the end. Here the backends report branches as they finish
(`Backend.report`: hf per row, sglang per request batch), the job loop adds what never reaches a backend
(row errors, resumed chunks), and a display reads the numbers at its own pace (rich redraws twice a second,
so elapsed time, rates and ETA move between events too).

Writers: the job loop's thread and the backend's reports (sglang's run on the engine's event loop, called
from the job's thread); the display reads from its refresh thread. Updates are taken under a lock so a
reader never sees tokens without their branches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class Progress:
    """Counts of one job while it runs. `records` are output rows (run: row × question; classify: rows).

    `total_rows` is the input's row count, counted before the job starts (`formats.count_rows`; None when the
    format cannot be counted cheaply). The total of records is exact once every chunk is read, and until then
    estimated from the chunks read so far (records per row × rows). `listener(progress)`, when given, is
    called after every update (the CLI moves its bar there; tests record the events).
    """

    def __init__(
        self,
        total_rows: int | None = None,
        listener: Callable[[Progress], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total_rows = total_rows
        self.listener = listener
        self.clock = clock
        self.rows_read = self.records_read = 0  # of the chunks read so far
        self.rows_done = self.records_done = self.branches_done = 0
        self.resumed_rows = self.resumed_records = 0  # done by an earlier run (--resume): not in the rates
        self.tokens = self.cached = self.warm = 0  # this run's branch (logical) tokens, cached, warm-up
        self.started: float | None = None  # when the first chunk was read: rates exclude model loading
        self._lock = threading.Lock()

    # -- updates -------------------------------------------------------------------------------------
    def _changed(self) -> None:
        if self.listener is not None:
            self.listener(self)

    def chunk_read(self, rows: int, records: int) -> None:
        """An input chunk was read: its rows and the output records they need."""
        with self._lock:
            if self.started is None:
                self.started = self.clock()
            self.rows_read += rows
            self.records_read += records
        self._changed()

    def resumed(self, rows: int, records: int) -> None:
        """A chunk finished by an earlier run of this job (`--resume`): done, not counted in the rates."""
        with self._lock:
            self.rows_done += rows
            self.records_done += records
            self.resumed_rows += rows
            self.resumed_records += records
        self._changed()

    def branches(self, n: int, tokens: int, cached: int, warm: int = 0, rows: int = 0) -> None:
        """`n` branches finished (their prompt and cached tokens, warm-up tokens computed meanwhile), which
        completed `rows` rows."""
        with self._lock:
            self.branches_done += n
            self.records_done += n
            self.rows_done += rows
            self.tokens += tokens
            self.cached += cached
            self.warm += warm
        self._changed()

    def settled(self, rows: int, records: int) -> None:
        """Rows and records of a chunk that never reached a backend (row errors, unpromptable questions)."""
        if rows or records:
            with self._lock:
                self.rows_done += rows
                self.records_done += records
            self._changed()

    # -- reading -------------------------------------------------------------------------------------
    @property
    def total_records(self) -> int | None:
        """Output records of the whole job: exact when every row is read, else estimated from the chunks
        read so far; None before the first chunk."""
        if not self.rows_read:
            return None
        if self.total_rows and self.total_rows > self.rows_read:
            return self.records_read + round(
                (self.total_rows - self.rows_read) * self.records_read / self.rows_read
            )
        return self.records_read

    def elapsed(self) -> float:
        return 0.0 if self.started is None else max(self.clock() - self.started, 0.0)

    def token_rate(self) -> float:
        e = self.elapsed()
        return self.tokens / e if e > 0 else 0.0

    def hit_rate(self) -> float | None:
        """1 − computed/logical over this run's branches so far (the summary's cache hit rate)."""
        if not self.tokens:
            return None
        return 1 - (self.tokens - self.cached + self.warm) / self.tokens

    def eta_s(self) -> float | None:
        """Seconds left at this run's record rate (resumed records excluded); None when unknown or done."""
        total, e = self.total_records, self.elapsed()
        ran = self.records_done - self.resumed_records
        if not total or ran <= 0 or e <= 0 or self.records_done >= total:
            return None
        return max(total - self.records_done, 0) / (ran / e)

    def text(self, noun: str = "questions") -> str:
        """One line: `120/400 questions · 30/100 rows · 2,345 tok/s · cache 71% · ETA 0:01:05` (the records
        part is left out when records are rows, as for classify)."""
        with self._lock:
            total = self.total_records
            parts = []
            if noun != "rows":
                parts.append(f"{self.records_done:,}" + (f"/{total:,}" if total else "") + f" {noun}")
            parts.append(
                f"{self.rows_done:,}" + (f"/{self.total_rows:,}" if self.total_rows else "") + " rows"
            )
            parts.append(f"{self.token_rate():,.0f} tok/s")
            if (h := self.hit_rate()) is not None:
                parts.append(f"cache {h:.0%}")
            if (eta := self.eta_s()) is not None:
                parts.append(f"ETA {_hms(eta)}")
        return " · ".join(parts)


def _hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Heartbeat:
    """A plain progress line every `every` seconds for a log (stderr not a terminal: `2>job.log`, cron,
    Kubernetes), where a redrawn bar shows nothing until the job ends (issue 34.3): the local time, the share
    done, `Progress.text` (records, rows, tok/s, cache, ETA) and the time since the first chunk. Lines start
    at the first chunk read (model loading shows nothing); one more when the job ends or stops. A context
    manager: its thread runs while the job does."""

    def __init__(self, progress: Progress, label: str, noun: str, write: Callable[[str], Any], every: float):
        self.progress, self.label, self.noun, self.write, self.every = progress, label, noun, write, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="openjev-heartbeat", daemon=True)

    def line(self) -> str:
        p = self.progress
        total = p.total_records
        share = f" {min(p.records_done / total, 1):.0%}" if total else ""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        return f"{stamp} {self.label}{share} · {p.text(self.noun)} · elapsed {_hms(p.elapsed())}"

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.progress.started is not None:
                self.write(self.line())

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self.progress.started is not None:
            self.write(self.line())


class WindowReports:
    """Passes a backend's reports for one window on to a Progress (`Backend.on_branches` while the window
    runs). A branch counts once: fault isolation re-runs a failed window's halves, so a branch reported before
    the failure may be reported again. `finish` counts what the backend did not report (a backend without
    reports, the error results of rows that failed alone)."""

    def __init__(self, window, backend, progress: Progress):
        self.backend, self.progress = backend, progress
        self.left = {rp.pos: len(rp.branches) for rp in window.rows}
        self.seen: set[tuple[int, int]] = set()
        self.warm_mark = backend.warm_tokens

    def __call__(self, done) -> None:
        """`done`: (RowPrompt, branch index, BranchResult) of each branch that just finished."""
        n = tokens = cached = rows = 0
        for rp, j, res in done:
            if (rp.pos, j) in self.seen or rp.pos not in self.left:
                continue
            self.seen.add((rp.pos, j))
            n, tokens, cached = n + 1, tokens + res.prompt_tokens, cached + res.cached_tokens
            self.left[rp.pos] -= 1
            rows += self.left[rp.pos] == 0
        warm = self.backend.warm_tokens - self.warm_mark
        self.warm_mark += warm
        if n or warm:
            self.progress.branches(n, tokens, cached, warm, rows)

    def finish(self, window, outs) -> None:
        self([(rp, j, r) for rp, res in zip(window.rows, outs, strict=True) for j, r in enumerate(res)])
