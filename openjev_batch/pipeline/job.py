"""A job from a file to an output file: the one loop (loop.py) over an input file (`FileSource`), one
backend in this process (`LocalRunner`, host stage of chunk k+1 overlapping chunk k) and the output store
(`StoreSink`), for any readout (readouts/): `run` is the label-logprobs readout, `classify` the
classifier-head one."""

from __future__ import annotations

from collections.abc import Callable

from ..backends import Backend
from ..config import RunConfig
from ..errors import ConfigError
from . import loop
from .progress import Progress
from .runners.local import LocalRunner
from .sink import StoreSink
from .source import FileSource
from .summary import Summary


def run_job(
    cfg: RunConfig,
    backend: Backend | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Run one job end to end and return its Summary. `backend` may be passed in (tests, eval) and is then
    not closed here. `on_progress(branches_done, tokens_done)` is called after each window; `progress`
    (a live display's counts) is updated as branches finish, its total rows counted first when not set.
    With `cfg.resume`, chunks already in the partial output are not run again (loop.run).

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, output count check failed); the partial output is then kept for `--resume`.
    """
    if cfg.output is None:
        raise ConfigError("an output path (-o) is needed; only --dry-run runs without one")
    source = FileSource(cfg)
    runner = LocalRunner(backend)
    s, _ = loop.run(cfg, source, StoreSink(cfg, source), runner, progress=progress, on_progress=on_progress)
    return s
