"""SIGINT and SIGTERM stop a job the same way: the window in flight is dropped, the finished chunks stay in
`<out>.partial/` for `--resume`, and the CLI prints a message and exits 130 (SIGINT) or 143 (SIGTERM).

Schedulers (cron, Slurm, Kubernetes) stop jobs with SIGTERM, whose default action kills the process
without a message; sglang's tokenizer manager also installs its own SIGTERM handler, which only drains
requests (the job then ran to completion). `stop_on_signals()` installs one handler for both signals
(the sglang backend puts it back after its engine starts: `restore_if_replaced`); the pipeline also calls `check()` between
windows, so a stop that some library swallowed still ends the job there.
"""

from __future__ import annotations

import signal
import threading

from .errors import JobInterrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested: int | None = None


def _handler(signum: int, frame) -> None:
    global _requested
    if _requested is not None:  # a second signal while the job is already stopping: let cleanup finish
        return
    _requested = signum
    raise JobInterrupted(signum)


def stop_on_signals() -> None:
    """From now on (the CLI calls it once per command), SIGINT and SIGTERM raise JobInterrupted in the main
    thread, once: later signals are ignored so engine shutdown and lock release complete."""
    global _requested
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return
    _requested = None
    for s in STOP_SIGNALS:
        signal.signal(s, _handler)
    # a closed terminal (SIGHUP) stops the command the same way, so its cleanup runs (a stdin copy stayed in
    # TMPDIR, issue 42); not under `nohup`, which asked for it to be ignored
    if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
        signal.signal(signal.SIGHUP, _handler)


def check() -> None:
    """Raise JobInterrupted when a stop signal arrived since `stop_on_signals` began."""
    if _requested is not None:
        raise JobInterrupted(_requested)


def restore_if_replaced(prev_term) -> None:
    """Put back the SIGTERM/SIGINT handler that was in place before a library replaced it (sglang's
    tokenizer manager installs a drain-only SIGTERM handler through its event loop)."""
    if prev_term is _handler:
        for s in STOP_SIGNALS:
            signal.signal(s, _handler)
