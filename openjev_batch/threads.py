"""`--threads`: how many CPU threads torch, OpenMP/MKL and the tokenizer use, and its default (the idle cores).
Set before torch is imported."""

from __future__ import annotations

import os

from .errors import ConfigError

MAX_THREADS = 1024


def apply_threads(n: int) -> None:
    """Use `n` CPU threads: OpenMP/MKL and the tokenizer's thread pool read their environment variables when
    first loaded, so this is called before torch is imported; torch.set_num_threads covers a torch already
    imported (the Python API). On a loaded 2-core machine, 1 thread ran 2.4× faster than the default
    (issue #20): the default oversubscribes the cores. Raises ConfigError for anything but 1…MAX_THREADS
    (100,000 threads exhausted the machine's thread limit and crashed OpenBLAS: hostile trial)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_THREADS:
        raise ConfigError(f"threads must be an integer from 1 to {MAX_THREADS}, got {n!r}")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[var] = str(n)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    else:
        import torch

        torch.set_num_threads(n)


def idle_cores() -> int:
    """The cores no one else is using: usable cores minus the 1-minute load average, at least 1 — the default
    of `--threads`. Torch's default (every core) oversubscribes a busy machine: the README's first job on a
    2-core machine at load 6–13 took 753 s with it and 43 s with 1 thread, the same numbers (a new-user trial,
    2026-12-01)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return n
    return max(1, min(n, int(n - load + 0.5)))


def default_threads() -> int | None:
    """`--threads` when not given: None (leave it) if the user set OMP_NUM_THREADS, else `idle_cores()`."""
    return None if os.environ.get("OMP_NUM_THREADS") else idle_cores()
