"""A job from a file to an output file (`run_job`): the one loop (loop.py) over an input file (`FileSource`),
one backend in this process (`LocalRunner`, host stage of chunk k+1 overlapping chunk k) or a pool of engine
actors on Ray (`RayRunner`), as `runners.for_job` chooses, and the output store (`StoreSink`), for any
readout (readouts/): `run` is the label-logprobs readout, `classify` the classifier-head one. Both write the
same file and resume each other's partial output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends import SPECS, Backend
from ..config import RunConfig
from ..errors import ConfigError
from ..readouts.base import Readout
from . import loop
from .dry_run import dry_run
from .input.source import FileSource
from .job_images import choose_images, needs_images_choice
from .output.sink import StoreSink
from .progress import Progress
from .runners import for_job
from .runners.ray import RayOptions
from .summary import Summary


def run_job(
    cfg: RunConfig,
    backend: Backend | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
    ray: Any = None,
    readout: Readout | None = None,
) -> Summary:
    """Run one job end to end and return its Summary: in this process, or on Ray with `ray` (a
    runners.ray.RayOptions, how it spreads; the summary is then a RaySummary and the output file equals the
    local one). `backend` may be passed in (tests, eval; not with `ray`) and is then not closed here.
    `on_progress(branches_done, tokens_done)` is called after each window; `progress` (a live display's
    counts) is updated as branches finish, its total rows counted first when not set. With `cfg.resume`,
    chunks already in the partial output are not run again (loop.run), nor rows an earlier Ray run staged.
    `readout`: the job's, built once by the caller (else the loop builds it).

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, output count check failed); the partial output is then kept for `--resume`. On Ray also
    ConfigError when Ray Data is missing or an option is out of range, before the input is read.
    """
    if cfg.output is None:
        raise ConfigError("an output path (-o) is needed; only --dry-run runs without one")
    runner = for_job(backend, ray)  # the one choice of local or Ray (Ray's refusals before the input is read)
    if backend is None and needs_images_choice(cfg):
        # the engine starts for this job: multimodal when its input has images. A missing or unreadable input
        # is its own error first (the loop checks again: cheap)
        FileSource(cfg).check()
        cfg, _ = choose_images(cfg)
    source = FileSource(cfg)
    sink = StoreSink(cfg, source)
    s, _ = loop.run(cfg, source, sink, runner, readout=readout, progress=progress, on_progress=on_progress)
    return s


def choose_request_pattern(cfg: RunConfig, readout: Readout | None = None) -> tuple[RunConfig, str]:
    """The choices the job's backend makes before its engine starts: whether its input has images
    (`choose_images`, for a backend whose engine is told at start: on sglang a vision-language model's engine
    then starts multimodal, and runs no multi-item), then its spec's `prepare` (on sglang, `--request-pattern
    auto` on a Qwen3.5/3.6 hybrid, multi-item or prefix-first from the planner's counts over the job's first
    chunk). `readout`: the job's, built once by the caller (else the plan builds it). Returns the config the job
    runs and the choices in words ('' when none was made)."""
    cfg, why_images = choose_images(cfg)

    def first_plan(c: RunConfig):
        n = min(c.chunk_rows, c.limit or c.chunk_rows)
        first = c.model_copy(update={"limit": n, "output": None, "resume": False, "progress": False})
        return dry_run(first, readout=readout)

    cfg, why = SPECS[cfg.backend].prepare(cfg, first_plan)
    return cfg, "; ".join(w for w in (why_images, why) if w)


def run_job_ray(
    cfg: RunConfig,
    opts: Any = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
):
    """`run_job` on Ray (`opts`: runners.ray.RayOptions, how it spreads; None: the defaults). Uses the
    connected Ray session when there is one (and leaves it open)."""
    return run_job(cfg, on_progress=on_progress, progress=progress, ray=opts or RayOptions())
