"""The Ray cluster side of `--ray`: how the job spreads (RayOptions), joining or starting a cluster, the GPUs
an engine actor reserves, the Ray Data plan of the two actor pools, and an actor's domain error recovered
from Ray's wrapper."""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .... import errors
from ....backends import SPECS
from ....config import RunConfig
from ....errors import BackendError, ConfigError, OpenjevError
from ....readouts.base import Readout
from .stages import RenderStage, ScoreStage


@dataclass(frozen=True)
class RayOptions:
    """How the job spreads over a Ray cluster.

    address: an existing cluster (`ray start --head` / KubeRay; "auto" finds the local one); None starts
    a local cluster for this job. workers: engine actors, one backend (one `sglang.Engine`) each.
    gpus_per_worker: None = tp_size×dp_size (sglang) or 1 (hf) when the cluster has GPUs and the device is
    not cpu, else 0. render_workers: CPU actors that render + tokenize (None = workers).
    bucket_rows: target rows per bucket (one planner call on one engine); an input chunk has at least
    4 buckets per worker (or one per row). grouping: "blocks" (the driver ships one block per bucket;
    rendering and scoring stream) or "groupby" (blocks of `ship_rows` rows, then
    `groupby(bucket).map_groups`: a shuffle barrier). num_cpus: logical CPUs of a local cluster
    (None = max(cores, what the actors and the shuffle need)).
    """

    address: str | None = None
    workers: int = 1
    gpus_per_worker: float | None = None
    cpus_per_worker: float = 1.0
    render_workers: int | None = None
    bucket_rows: int = 2048
    grouping: str = "blocks"
    ship_rows: int = 1024
    num_cpus: int | None = None


def _connect(ray, opts: RayOptions, render_workers: int) -> bool:
    """Join `opts.address` or start a local cluster (True: this call started it and must shut it down).
    A local cluster declares enough logical CPUs that the actors and the shuffle all get one: with as
    many as cores, two 1-CPU actors on 2 cores leave the read task none and the job hangs."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = dict(logging_level=logging.WARNING, log_to_driver=True)
    if opts.address:
        ray.init(address=opts.address, **kw)
    else:
        need = math.ceil(opts.workers * opts.cpus_per_worker) + render_workers + 4
        ray.init(num_cpus=opts.num_cpus or max(os.cpu_count() or 1, need), include_dashboard=False, **kw)
    return True


def _gpus(have: float, cfg: RunConfig, opts: RayOptions) -> float:
    """The GPUs each engine actor takes on a cluster of `have` GPUs: `--gpus-per-worker`, else the backend's
    own (its spec), 0 on a CPU cluster or with --device cpu. Raises ConfigError for what cannot be served."""
    if opts.gpus_per_worker is not None:
        g = opts.gpus_per_worker
    elif cfg.device == "cpu" or not have:
        g = 0
    else:
        g = SPECS[cfg.backend].gpus_per_worker(cfg)
    if g < 0:
        raise ConfigError("--gpus-per-worker must be ≥ 0")
    if g and opts.workers * g > have:
        raise ConfigError(
            f"--workers {opts.workers} × --gpus-per-worker {g:g} needs {opts.workers * g:g} GPUs; "
            f"the Ray cluster has {have:g}"
        )
    if g:
        SPECS[cfg.backend].check_gpus(cfg, g)
    if not g and cfg.device == "cuda":
        raise ConfigError(
            "--device cuda with 0 GPUs per worker (the Ray cluster has none, or --gpus-per-worker 0)"
        )
    return g


def _iter_results(
    ray, refs: list, cfg: RunConfig, readout: Readout, opts: RayOptions, n_buckets: int, gpus: float
) -> Iterator:
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    render = opts.render_workers or opts.workers
    actor_cfg = cfg if gpus else cfg.model_copy(update={"device": "cpu"})  # no GPU reserved: never touch one
    ds = ray.data.from_arrow_refs(refs).map_batches(
        RenderStage,
        fn_constructor_kwargs={
            "model": cfg.model,
            "readout": readout,
            "trust_remote_code": cfg.trust_remote_code,
        },
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=render),
        batch_size=None,
        batch_format="pyarrow",
        num_cpus=1,
    )
    score = dict(
        fn_constructor_kwargs={"cfg": actor_cfg, "readout": readout},
        compute=ray.data.ActorPoolStrategy(size=opts.workers),
        batch_format="pyarrow",
        num_cpus=opts.cpus_per_worker,
        num_gpus=gpus,
    )
    # "blocks": a block is a bucket and stays whole from the driver through both actor pools, which needs
    # batch_size=None; Ray 2.60's public map_batches refuses that when GPUs are requested (found on the
    # H200). map_groups has the same need and calls the unvalidated map_batches_internal
    # (ray/data/grouped_data.py); so do we, and use groupby where a Ray lacks it.
    internal = getattr(ds, "map_batches_internal", None)
    if opts.grouping == "groupby" or (gpus and internal is None):
        parts = min(n_buckets, 4 * opts.workers)
        ds = ds.groupby("bucket", num_partitions=parts).map_groups(ScoreStage, **score)
    else:
        # (gpus and internal is None took the branch above)
        ds = (internal if gpus and internal is not None else ds.map_batches)(ScoreStage, batch_size=None, **score)
    return ds.iter_batches(batch_size=None, batch_format="pyarrow")


def _domain_error(e: Exception) -> OpenjevError:
    """The OpenjevError an actor raised, recovered from Ray's wrapper (which keeps only its text),
    else a BackendError with the wrapper's last line."""
    text = str(e)
    found = re.findall(r"openjev_batch\.errors\.(\w+): (.*)", text)
    if found and isinstance(getattr(errors, found[-1][0], None), type):
        cls = getattr(errors, found[-1][0])
        if issubclass(cls, OpenjevError):
            return cls(f"{found[-1][1]} (in a Ray worker; finished rows are kept for --resume)")
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), type(e).__name__)
    return BackendError(f"the Ray job failed: {type(e).__name__}: {last[:1000]}")
