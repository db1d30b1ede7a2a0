"""A job from a file to an output file (`run_job`): the one loop (loop.py) over an input file (`FileSource`),
one backend in this process (`LocalRunner`, host stage of chunk k+1 overlapping chunk k) or a pool of engine
actors on Ray (`RayRunner`), as `runners.for_job` chooses, and the output store (`StoreSink`), for any
readout (readouts/): `run` is the label-logprobs readout, `classify` the classifier-head one. Both write the
same file and resume each other's partial output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..backends import Backend
from ..backends.sglang.mis import needs_fork
from ..backends.sglang.patterns import MAX_MULTI_ITEM_RECOMPUTE, advice
from ..checkpoint.info import model_info
from ..config import RunConfig
from ..errors import ConfigError
from . import loop
from .dry_run import dry_run
from .input.source import FileSource
from .job_images import choose_images
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
) -> Summary:
    """Run one job end to end and return its Summary: in this process, or on Ray with `ray` (a
    runners.ray.RayOptions, how it spreads; the summary is then a RaySummary and the output file equals the
    local one). `backend` may be passed in (tests, eval; not with `ray`) and is then not closed here.
    `on_progress(branches_done, tokens_done)` is called after each window; `progress` (a live display's
    counts) is updated as branches finish, its total rows counted first when not set. With `cfg.resume`,
    chunks already in the partial output are not run again (loop.run), nor rows an earlier Ray run staged.

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, output count check failed); the partial output is then kept for `--resume`. On Ray also
    ConfigError when Ray Data is missing or an option is out of range, before the input is read.
    """
    if cfg.output is None:
        raise ConfigError("an output path (-o) is needed; only --dry-run runs without one")
    runner = for_job(backend, ray)  # the one choice of local or Ray (Ray's refusals before the input is read)
    if backend is None and cfg.backend == "sglang" and cfg.images is None:
        # the engine starts for this job: multimodal when its input has images. A missing or unreadable input
        # is its own error first (the loop checks again: cheap)
        FileSource(cfg).check()
        cfg, _ = choose_images(cfg)
    source = FileSource(cfg)
    s, _ = loop.run(cfg, source, StoreSink(cfg, source), runner, progress=progress, on_progress=on_progress)
    return s


def choose_request_pattern(cfg: RunConfig) -> tuple[RunConfig, str]:
    """`--request-pattern auto` for a job on a Qwen3.5/3.6 hybrid on sglang, where multi-item scoring (one request
    per ticket, the state fork) and prefix-first are both exact: chosen from the planner's own counts over the
    job's first chunk, before the engine starts (multi-item is fixed when it starts). Multi-item runs without the
    radix cache, so a long block shared by different rows (a few-shot prefix) is computed in every pack:
    prefix-first when that makes multi-item compute more than `MAX_MULTI_ITEM_RECOMPUTE` × the unique tokens.
    Returns the config (with the pattern set when prefix-first is chosen, and `images` by `choose_images`: a job
    with images runs no multi-item) and the choice in words ('' when the job is not such a job)."""
    if cfg.backend != "sglang":
        return cfg, ""
    cfg, why = choose_images(cfg)
    if cfg.images or cfg.sglang.request_pattern != "auto":  # with images the engine runs no multi-item
        return cfg, why

    if not needs_fork({"architectures": [model_info(cfg.model).architecture]}):
        return cfg, ""

    n = min(cfg.chunk_rows, cfg.limit or cfg.chunk_rows)
    p = dry_run(cfg.model_copy(update={"limit": n, "output": None, "resume": False, "progress": False}))
    if p.unique_tokens and p.multi_item_tokens / p.unique_tokens > MAX_MULTI_ITEM_RECOMPUTE:
        why = f"request pattern auto → prefix-first: on the first {p.rows:,} rows " + advice(
            p.multi_item_tokens, p.unique_tokens
        ).split(":")[0]
        return cfg.model_copy(update={"request_pattern": "prefix-first"}), why
    return cfg, f"request pattern auto → multi-item where the engine runs it: on the first {p.rows:,} rows " + advice(
        p.multi_item_tokens, p.unique_tokens
    )


def run_job_ray(
    cfg: RunConfig,
    opts: Any = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
):
    """`run_job` on Ray (`opts`: runners.ray.RayOptions, how it spreads; None: the defaults). Uses the
    connected Ray session when there is one (and leaves it open)."""
    return run_job(cfg, on_progress=on_progress, progress=progress, ray=opts or RayOptions())
