"""The processes an sglang engine of this process started, so that stopping one engine (or cleaning up after
one that failed to start) never touches another engine's processes."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


def kill_new_children(before: set[int]) -> None:
    """Kill (with their descendants) the child processes that were not there in `before`: what a failed
    `sglang.Engine(...)` left running. Other children (e.g. another engine of this process) are spared."""
    kill_children(children_pids() - before)


def kill_children(pids: set[int] | frozenset[int]) -> None:
    """Kill the child processes `pids` of this process, with their descendants, and reap them."""
    try:
        import psutil
    except ImportError:
        return
    for c in psutil.Process().children():
        if c.pid not in pids:
            continue
        with contextlib.suppress(psutil.Error):
            for d in c.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    d.kill()
            c.kill()
            c.wait(timeout=30)


@contextlib.contextmanager
def own_children_only(own: frozenset[int] | None) -> Iterator[None]:
    """While one engine shuts down, its `kill_process_tree(os.getpid(), include_parent=False)` kills only the
    processes that engine started. sglang 0.5.19's `Engine.shutdown` kills every child of this process, so
    closing one engine killed any other engine of the process too: a held `Classifier` lost its engine when a
    second one closed, and its next request waited forever on a dead scheduler (seen in the test session:
    the session's engine died as the vision module's engine closed, and `flush_cache` hung for 25 min).
    None (an engine not started by `start_engine`): sglang's own kill."""
    mod = _sglang_engine_module() if own is not None else None
    if own is None or mod is None or not hasattr(mod, "kill_process_tree"):
        yield
        return
    original = mod.kill_process_tree

    def kill_own(parent_pid, include_parent: bool = True, *args, **kwargs):
        if parent_pid != os.getpid() or include_parent:
            return original(parent_pid, include_parent, *args, **kwargs)
        kill_children(own)  # every other child (another engine's) is spared

    mod.kill_process_tree = kill_own
    try:
        yield
    finally:
        mod.kill_process_tree = original


def _sglang_engine_module():
    return sys.modules.get("sglang.srt.entrypoints.engine")


def children_pids() -> set[int]:
    try:
        import psutil

        return {c.pid for c in psutil.Process().children()}
    except Exception:
        return set()
