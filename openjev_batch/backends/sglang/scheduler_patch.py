"""sglang's scheduler process with the product's patches installed (`--sglang-patches` chooses them; each is a module
of scheduler_patches/, which says what it fixes and what it measured):

- `gather`: the label-logprob gather without a host-device synchronisation (workaround for sgl-project/sglang#39642);
- `readback`: multi-item scoring's label logprobs copied to the host without blocking;
- `idle-check`: sglang's idle radix-tree sanity check run at most once every `IDLE_CHECK_INTERVAL_S`;
- `alloc`: a hybrid engine's state-slot mapping written without blocking the host (opt-in: `with-alloc`).

Each patch installs only where sglang has the structure it replaces and is otherwise a no-op (sglang's own
path runs, only slower); `--sglang-patches` chooses them (all | gather | readback | none) to measure them.
Which ran is logged once per scheduler process (level info: `--engine-arg log_level=info` shows it; a
requested patch this sglang has no place for is a warning).

This module is imported in sglang's spawned scheduler process: it must stay light (torch only, lazily).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from . import gpu_profile
from .scheduler_errors import report_failures
from .scheduler_patches.alloc import ALLOC_MAPPINGS, alloc_target, apply_alloc  # noqa: F401
from .scheduler_patches.gather import apply, token_ids_logprobs_no_sync  # noqa: F401
from .scheduler_patches.idle_check import IDLE_CHECK_INTERVAL_S, apply_idle_check  # noqa: F401
from .scheduler_patches.readback import apply_readback, host_copy_token_ids_logprobs, readback_target  # noqa: F401

log = logging.getLogger(__name__)

# the --sglang-patches choices (options.py validates against these keys)
PATCH_SETS: dict[str, tuple[str, ...]] = {
    # `alloc` is opt-in until a GPU run measures it (issue 38: the one device call of 2026-12-05 never got past
    # engine start); `all` stays the set the benchmarks measured
    "all": ("gather", "readback", "idle-check"),
    "with-alloc": ("gather", "readback", "idle-check", "alloc"),
    "gather": ("gather",),
    "readback": ("readback",),
    "none": (),
}

INSTALLERS = {"gather": apply, "readback": apply_readback, "idle-check": apply_idle_check, "alloc": apply_alloc}


def install(patches: tuple[str, ...] = PATCH_SETS["all"]) -> dict[str, bool]:
    """Install these patches in this process; logs once which are active. Returns {patch: installed}.
    Also starts the GPU timeline profile when `gpu_profile.ENV` asks for one (a diagnosis, never a default)."""
    done = {name: INSTALLERS[name]() for name in patches}
    gpu_profile.install_from_env()
    off = [n for n in PATCH_SETS["with-alloc"] if n not in patches]
    log.info(
        "openjev-batch scheduler patches: %s",
        ", ".join(
            [f"{n}={'on' if ok else 'not in this sglang'}" for n, ok in done.items()]
            + [f"{n}=off" for n in off]
        ),
    )
    for n, ok in done.items():
        if not ok:
            log.warning("openjev-batch: this sglang has no place for the %s patch; its own path runs", n)
    return done


def run_scheduler_process_with(patches: tuple[str, ...], *args: Any, **kwargs: Any) -> Any:
    """sglang's scheduler process entry point with `patches` installed first (spawned by reference)."""
    install(patches)
    report_failures()
    from sglang.srt.managers.scheduler import run_scheduler_process as run

    return run(*args, **kwargs)


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """The scheduler entry point with every patch (the product's default)."""
    return run_scheduler_process_with(PATCH_SETS["all"], *args, **kwargs)


def engine_class(patches: str = "all"):
    """`sglang.Engine` whose scheduler processes install `patches` (a PATCH_SETS key); plain
    `sglang.Engine` on a release without the `run_scheduler_process_func` hook (then sglang's own readout
    runs, only slower)."""
    # The class itself: `sglang.Engine` is a lazy-import proxy that cannot be subclassed.
    from sglang.srt.entrypoints.engine import Engine as SGLangEngine

    if not hasattr(SGLangEngine, "run_scheduler_process_func"):
        return SGLangEngine
    names = PATCH_SETS[patches]
    # A module function (or a partial of one) pickles by reference into the spawned scheduler processes.
    func = (
        run_scheduler_process
        if names == PATCH_SETS["all"]
        else functools.partial(run_scheduler_process_with, names)
    )

    class Engine(SGLangEngine):
        run_scheduler_process_func = staticmethod(func)

    return Engine
