"""The `idle-check` patch: sglang's idle radix-tree sanity check rate-limited.

The idle tree check (`idle-check`): sglang 0.5.17 runs `SchedulerInvariantChecker._check_tree_cache` (a walk
of the whole radix tree, `UnifiedRadixCache.sanity_check`) every time the scheduler is fully idle, and for a
hybrid (mamba) model always. A prefix-first job leaves the scheduler idle between request batches, and the tree
holds every cached prefix: py-spy on the H200 (35B-A3B shape, W3 5,000 tickets, docs/benchmarks.md run 5) put
20 % of the scheduler's samples there, on the path between two batches. It is a debug invariant (it only logs
a leak); the product runs it at most once every `IDLE_CHECK_INTERVAL_S`.
"""

from __future__ import annotations

import functools
from typing import Any

IDLE_CHECK_INTERVAL_S = 30.0


def apply_idle_check(interval_s: float = IDLE_CHECK_INTERVAL_S) -> bool:
    """Run sglang's idle radix-tree sanity check at most once every `interval_s` seconds in this process.
    Returns False (and changes nothing) where sglang has no `SchedulerInvariantChecker._check_tree_cache`."""
    import importlib
    import time

    try:
        ic = importlib.import_module("sglang.srt.managers.scheduler_components.invariant_checker")
    except ImportError:
        return False
    cls: Any = getattr(ic, "SchedulerInvariantChecker", None)
    stock = getattr(cls, "_check_tree_cache", None)
    if not callable(stock):
        return False
    if getattr(stock, "_openjev_idle", False):
        return True
    last = [float("-inf")]

    @functools.wraps(stock)
    def _check_tree_cache(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - last[0] < interval_s:
            return None
        last[0] = now
        return stock(self, *args, **kwargs)

    _check_tree_cache._openjev_idle = True  # type: ignore[attr-defined]
    cls._check_tree_cache = _check_tree_cache
    return True
