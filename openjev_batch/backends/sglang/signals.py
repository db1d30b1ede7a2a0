"""The product, not sglang, decides what happens to the process when an sglang engine dies or the job is stopped.

sglang 0.5.19 (`entrypoints/engine._set_envs_and_config`, `managers/tokenizer_manager.SignalHandler`):
- a scheduler or detokenizer that hits an exception sends SIGQUIT to this process, and sglang's
  `SubprocessWatchdog` thread sends one when a child exits non-zero (e.g. a killed scheduler); sglang's
  SIGQUIT handlers answer with `kill_process_tree(os.getpid())`, a SIGKILL of this very process: the job
  died with rc 137 and no message, at start-up (a KV pool that does not fit) or mid-job;
- the tokenizer manager's event loop takes SIGTERM for a "drain requests" handler, so a SIGTERM never
  stopped a job (it ran to completion).

Here: the engine starts with `custom_sigquit_handler=on_sigquit` (sglang's own hook, installed instead of
the killing one for the launch phase); once it runs, the loop's SIGTERM/SIGQUIT handlers are removed, SIGQUIT
goes to `on_sigquit` again and SIGTERM/SIGINT back to the handler that was there before (the CLI's, see
interrupts.py). `on_sigquit` records the cause and, only while the main thread waits on the engine (start-up or
a request batch), raises EngineDied, which the backend turns into a BackendError: exit 4 with a message, the
partial output kept. The cause names the failed process and its exit code, or the scheduler's exception
(its last traceback line, written by the scheduler process to `ERROR_FILE_ENV`, see sglang_patches).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any, TypedDict

from ...checkpoint.trust import trust_hint
from ...errors import BackendError, EngineDied, JobInterrupted
from .processes import children_pids, kill_new_children, own_children_only

ERROR_FILE_ENV = "OPENJEV_ENGINE_ERROR_FILE"
# What a script without a main guard gets, in one line instead of sglang's "possibly out of memory" and
# Python's RuntimeError buried in the engine's log (issue 26).
MAIN_GUARD = (
    'the script that started the sglang engine has no `if __name__ == "__main__":` guard: sglang starts '
    "its processes with multiprocessing's spawn, which re-runs the script's top level in each of them; put "
    "the code that runs the job under that guard (README: Python API)"
)


def refuse_unguarded_main() -> None:
    """In a process that multiprocessing's spawn is bootstrapping (it re-runs the user's script as it
    imports it), starting an engine is the missing-guard mistake: record MAIN_GUARD in the starting
    engine's error file (inherited through ERROR_FILE_ENV), for its parent to report, and exit."""
    from multiprocessing import process

    if not getattr(process.current_process(), "_inheriting", False):
        return
    path = os.environ.get(ERROR_FILE_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(MAIN_GUARD + "\n")
        except OSError:
            pass
    raise SystemExit(1)


def _error_lines(path: str | None) -> list[str]:
    try:
        with open(path or "") as f:
            return [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return []




class _State(TypedDict):
    waiting: int  # blocks waiting on the engine (waiting_on_engine)
    cause: str | None  # a recorded engine death
    error_file: str | None  # where the scheduler writes its failure


_state: _State = {"waiting": 0, "cause": None, "error_file": None}
_engines: weakref.WeakSet = weakref.WeakSet()  # running engines (their processes name a death's cause)


class _DropCustomHandlerNotice(logging.Filter):
    """sglang logs the use of `custom_sigquit_handler` at ERROR level; here it is the normal case."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Using custom SIGQUIT handler")


logging.getLogger("sglang.srt.entrypoints.engine").addFilter(_DropCustomHandlerNotice())
# sglang's quantization modules warn at import on a machine without CUDA ("Only CUDA … support AWQ"), four
# lines above the one-line "sgl_kernel missing: use --backend hf" (issue 25); nothing here uses them
warnings.filterwarnings("ignore", r"Only CUDA", UserWarning, r"sglang\.srt\.layers\.quantization")


def _signal_name(code: int) -> str:
    try:
        return f" (killed by {signal.Signals(-code).name})" if code < 0 else ""
    except ValueError:
        return ""


def failure_cause() -> str:
    """What failed, as well as this process can tell: the scheduler's exception, else an engine process
    that exited (pid and exit code), else a generic line."""
    lines = _error_lines(_state["error_file"])
    if MAIN_GUARD in lines:
        return MAIN_GUARD
    if lines:  # the traceback is not printed (scheduler_errors._TracebackAtInfo): say how to see it
        return f"the sglang scheduler failed: {lines[-1]} (its traceback: --engine-arg log_level=info)"
    for engine in list(_engines):
        # sglang's SubprocessWatchdog holds the engine's processes (it has already reaped a dead one, so
        # multiprocessing.active_children() no longer lists it)
        wd = getattr(getattr(engine, "tokenizer_manager", None), "_subprocess_watchdog", None)
        for p, name in zip(getattr(wd, "_processes", []), getattr(wd, "_names", []), strict=False):
            code = p.exitcode
            if code not in (None, 0):
                return f"sglang's {name} process (pid {p.pid}) exited with code {code}{_signal_name(code)}"
    import multiprocessing

    for p in multiprocessing.active_children():  # also reaps the ones that exited
        if p.exitcode not in (None, 0):
            return f"an sglang engine process (pid {p.pid}) exited with code {p.exitcode}{_signal_name(p.exitcode)}"
    try:
        import psutil

        dead = [c for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
        if dead:
            return f"an sglang engine process (pid {dead[0].pid}) exited"
    except Exception:
        pass
    return "an sglang engine process reported a failure (SIGQUIT; its log is above)"


def on_sigquit(signum, frame) -> None:
    """SIGQUIT from an engine process (or sglang's watchdog): record the cause; raise EngineDied only where
    the main thread waits on the engine, so it never lands in unrelated code."""
    cause = failure_cause()
    _state["cause"] = _state["cause"] or cause
    if _state["waiting"]:
        raise EngineDied(cause)


def cause() -> str | None:
    """The recorded cause of an engine death, or None while the engine is believed alive."""
    return _state["cause"]


@contextlib.contextmanager
def waiting_on_engine() -> Iterator[None]:
    """Mark the block as waiting on the engine: a SIGQUIT in it raises EngineDied here."""
    _state["waiting"] += 1
    try:
        if _state["cause"]:
            raise EngineDied(_state["cause"])
        yield
    finally:
        _state["waiting"] -= 1


@contextlib.contextmanager
def starting(error_file: str) -> Iterator[None]:
    """Around `sglang.Engine(...)`: the scheduler processes spawned in it inherit `ERROR_FILE_ENV`."""
    _state["cause"], _state["error_file"] = None, error_file
    old = os.environ.get(ERROR_FILE_ENV)
    os.environ[ERROR_FILE_ENV] = error_file
    try:
        with waiting_on_engine():
            yield
    finally:
        if old is None:
            os.environ.pop(ERROR_FILE_ENV, None)
        else:
            os.environ[ERROR_FILE_ENV] = old


def take_over_signals(engine, prev_term) -> None:
    """After the engine started: remove the tokenizer manager's loop handlers (SIGTERM drain, SIGQUIT
    kill), route SIGQUIT to `on_sigquit` and put SIGTERM/SIGINT back to `prev_term` (the CLI's handler).
    A no-op outside the main thread (sglang installs nothing there either)."""
    _engines.add(engine)
    if threading.current_thread() is not threading.main_thread():
        return
    tm = getattr(engine, "tokenizer_manager", None)
    if tm is not None and hasattr(tm, "auto_create_handle_loop") and hasattr(engine, "loop"):

        async def create() -> None:  # inside the engine's loop: it binds its handle loop to the running one
            tm.auto_create_handle_loop()

        # sglang installs its loop's handlers on the first request; do it now, then take them back
        engine.loop.run_until_complete(create())
        loop = getattr(tm, "event_loop", None)
        if loop is not None:
            for s in (signal.SIGTERM, signal.SIGQUIT):
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(s)
    signal.signal(signal.SIGQUIT, on_sigquit)
    if prev_term is not None:  # None: a handler not set from Python, which cannot be put back
        signal.signal(signal.SIGTERM, prev_term)


EXTERNAL_MODELS_ENV = "SGLANG_EXTERNAL_MODEL_PACKAGE"


@contextlib.contextmanager
def external_models(package: str | None) -> Iterator[None]:
    """`SGLANG_EXTERNAL_MODEL_PACKAGE=package` while an engine starts (its scheduler, spawned meanwhile,
    imports the package's model classes into sglang's registry), then as before. None: leave it alone.
    Raises BackendError when the user set it to another package (two overrides cannot both load)."""
    prev = os.environ.get(EXTERNAL_MODELS_ENV)
    if package and prev and prev != package:
        raise BackendError(f"{EXTERNAL_MODELS_ENV} is set to {prev!r}, but this engine needs {package!r}; unset it")
    if package:
        os.environ[EXTERNAL_MODELS_ENV] = package
    try:
        yield
    finally:
        if package and prev is None:
            os.environ.pop(EXTERNAL_MODELS_ENV, None)


def start_engine(make, kw: dict, opts, external_package: str | None = None) -> tuple[Any, str]:
    """Start an engine with `make(**kw)` under the product's signal handling, for both sglang backends
    (`make` imports sglang's Engine, so a missing sgl_kernel is raised here and named with its hint):
    SIGQUIT from a failing engine process is recorded (sglang's own handler SIGKILLs this process), the
    scheduler writes its error to a file this process reads, SIGTERM/SIGINT go back to the CLI's handler.
    Returns (engine, error file: the caller unlinks it at close). On failure kills what the half-started
    engine left running and raises BackendError naming the model (`opts`: its BackendOptions) and, where a
    refused checkpoint is why, the option that allows it (JobInterrupted passes through). `external_package`:
    our sglang model classes to register while it starts (`external_models`)."""
    import tempfile

    refuse_unguarded_main()
    kw = {**kw}
    kw.setdefault("custom_sigquit_handler", on_sigquit)
    prev_term = signal.getsignal(signal.SIGTERM)
    fd, error_file = tempfile.mkstemp(prefix="openjev-engine-", suffix=".err")
    os.close(fd)
    before = children_pids()
    try:
        with starting(error_file), external_models(external_package):
            engine = make(**kw)
        take_over_signals(engine, prev_term)
        engine._openjev_children = frozenset(children_pids() - before)  # what stop_engine may kill
    except BaseException as e:  # a scheduler that fails → EngineDied / RuntimeError / SystemExit here
        kill_new_children(before)
        unguarded = MAIN_GUARD in _error_lines(error_file)
        os.unlink(error_file)
        if unguarded:
            raise BackendError(MAIN_GUARD) from None
        if isinstance(e, JobInterrupted):
            raise
        if isinstance(e, ImportError) and "sgl_kernel" in str(e):
            from .kwargs import NO_SGL_KERNEL  # lazy: keeps --help fast (`python -m` loads signals.py)

            raise BackendError(NO_SGL_KERNEL) from None
        why = str(e) if isinstance(e, EngineDied) else f"{type(e).__name__}: {e}"
        hint = trust_hint(opts, e)  # a hub checkpoint with pickle weights only, or its own code
        if kw.get("device") == "cpu" and "cuda" in why.lower():  # e.g. Qwen3.5/3.6: "extra_buffer needs CUDA"
            hint += " (sglang's CPU engine cannot run this model; -b hf runs it on a CPU)"
        raise BackendError(f"sglang.Engine could not start with {opts.model!r}: {why}{hint}") from None
    return engine, error_file


def stop_engine(engine, error_file: str | None) -> None:
    """The other end of `start_engine`: shut the engine down (None: nothing started) and remove its error
    file."""
    if engine is not None:
        with own_children_only(getattr(engine, "_openjev_children", None)):
            engine.shutdown()
    if error_file:
        with contextlib.suppress(OSError):
            os.unlink(error_file)
