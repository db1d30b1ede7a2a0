"""Run in sglang's scheduler process (scheduler_patch.run_scheduler_process_with installs it): the cause of a
scheduler failure written where the parent reads it (sglang_signals), and sglang's long traceback kept for
level info. Light: imported in the spawned process before sglang's scheduler runs."""

from __future__ import annotations

import logging


class _TracebackAtInfo(logging.Filter):
    """Drops sglang's "Scheduler hit an exception: <traceback>" record unless its logger shows info
    (`--engine-arg log_level=info`): the parent's one-line message names the cause from the error file, and
    the ~40-line traceback printed above it buried that line (issue 25)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Scheduler hit an exception"):
            return True
        return logging.getLogger(record.name).getEffectiveLevel() <= logging.INFO


def report_failures() -> None:
    """In the scheduler process: also write the last line of the exception sglang's scheduler hits (it logs
    the traceback, then SIGQUITs the parent) to the file named by $OPENJEV_ENGINE_ERROR_FILE, so the
    parent's message names the cause (sglang_signals); the traceback itself is logged only at level info
    (`_TracebackAtInfo`). Changes nothing without that variable or when the scheduler module has no
    `get_exception_traceback`."""
    import os

    path = os.environ.get("OPENJEV_ENGINE_ERROR_FILE")
    if not path:
        return
    import sglang.srt.managers.scheduler as sch

    orig = getattr(sch, "get_exception_traceback", None)
    if not callable(orig):
        return

    def traced() -> str:
        tb = orig()
        last = next((ln.strip() for ln in reversed(tb.splitlines()) if ln.strip()), "")
        try:
            with open(path, "a") as f:
                f.write(last[:2000] + "\n")
        except OSError:
            pass
        return tb

    sch.get_exception_traceback = traced
    sch.logger.addFilter(_TracebackAtInfo())
