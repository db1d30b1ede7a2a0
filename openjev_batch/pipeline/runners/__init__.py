"""Runners: what scores a job's chunks for the one loop (pipeline/loop.py). A runner is opened for one job
(`open(cfg, readout)`: its backend started or configured) and turns the chunks the loop gives it, (index,
rows) for the chunks still to do, into (index, records, info) — `info`: the chunk's numbers that are not in
its records (warm-up and planned unique tokens). `labels` are a started backend's (classifier-head), `name`
names the backend in errors, `describe()` gives the Summary's model, pattern and start-up, and what a runner
that scores nothing counted instead (`counted`). `Runner` is that protocol; `for_job` chooses the runner
of a job that scores (local or Ray).

- `local.LocalRunner`: one backend in this process, the host stage of chunk k+1 under chunk k.
- `plan_only.PlanOnlyRunner`: the tokenizer alone: each chunk prompted and planned (`--dry-run`), or
  rendered (`--show-prompt`).
- `parse_only.ParseOnlyRunner`: no tokenizer: each row's problems (`validate`).
- `ray.RayRunner`: engine actors on a Ray cluster, chunks handed back as their buckets return (in any
  order); its staged rows are its own crash safety within a chunk. Every runner's `summary_type`
  (`Summary`, or a subclass) takes what `describe()` adds (the Ray runner's workers, buckets, rows it scored).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ...core import RowError
from ...errors import ConfigError
from .local import LocalRunner
from .ray import RayRunner
from .streams import OnProgress, Scored, Todo

if TYPE_CHECKING:
    from ...backends import Backend
    from ...config import RunConfig
    from ...readouts.base import Readout
    from ..prefill import FailureTracker
    from ..progress import Progress
    from ..summary import Summary
    from .ray import RayOptions


class Runner(Protocol):
    """What the loop asks of a runner (the docstring above says each part); every runner here is one."""

    @property  # read-only, so a runner may name a Summary subclass (RayRunner: RaySummary)
    def summary_type(self) -> type[Summary]: ...

    @property
    def labels(self) -> tuple[str, ...] | None: ...

    @property
    def name(self) -> str: ...

    def open(self, cfg: RunConfig, readout: Readout) -> AbstractContextManager[Runner]: ...

    def describe(self) -> dict[str, Any]: ...

    def score(self, todo: Todo, tracker: FailureTracker, progress: Progress | None = None,
              on_progress: OnProgress | None = None) -> Scored: ...  # fmt: skip


def for_job(backend: Backend | None = None, ray: RayOptions | None = None) -> Runner:
    """The runner of a job that scores its rows: on Ray (`ray`: how the job spreads over engine actors) or
    in this process (`backend`, kept open; None: one loaded for the job). The one place that chooses
    between them. Raises ConfigError for both (Ray's actors start their own backends) and, for Ray, when
    Ray Data is missing or an option is out of range (runners.ray.RayRunner)."""
    if ray is None:
        return LocalRunner(backend)
    if backend is not None:
        raise ConfigError("a job on Ray starts its backends in the engine actors: pass no backend")
    return RayRunner(ray)


def stand_ins(readout: Any, chunk: list, errors: dict[int, list[str]]) -> pa.Table:
    """What stands for a chunk's output in a job that scores nothing (the null sink counts it): each row's
    `readout.n_records(row)` records, as one table of the readout's columns with `id` and `error` filled and
    the others null. A parsed row's first records carry its `errors` (by row position), a RowError's all
    carry its error: which record an error belongs to does not matter to a count. Built column by column:
    a dict per record made a 100k-row dry run seconds slower."""
    ids: list[str | None] = []
    errs: list[str | None] = []
    for row in chunk:
        n = readout.n_records(row)
        e = [row.error] * n if isinstance(row, RowError) else list(errors.get(row.pos, ()))
        ids.extend([row.id] * max(n, len(e)))
        errs.extend(e)
        errs.extend([None] * (n - len(e)))
    schema, n = readout.schema, len(ids)
    cols = {"id": pa.array(ids, pa.string()), "error": pa.array(errs, pa.string())}
    return pa.Table.from_arrays([cols.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema)
