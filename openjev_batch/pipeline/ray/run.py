"""Scale-out on Ray Data: the job of `pipeline.run_job`, scored by a pool of engine actors.

    driver       job_rows (input order, row errors, duplicate ids, --resume); bucket of each row =
                 hash(its prefix text, input chunk) mod n ─▶ one object-store block per bucket
    CPU actors   pipeline.prompt_chunk (render + tokenize), block by block
    GPU actors   one backend each (one sglang.Engine); a block = a bucket → pipeline.score_chunk
                 (plan → prefill with fault isolation → read out), the single-machine stage functions
    driver       result blocks ─▶ <out>.partial/ray/*.parquet as they arrive ─▶ per input chunk, in input
                 order, through store.OutputStore (the same parts, manifest, count check and --resume as a
                 single-machine run) ─▶ <out>

Rows are bucketed by `readout.prefix_key(row)`, text that is equal exactly when two rows share their whole
prefix (label-logprobs: the conversation under the fixed instructions; classifier-head: the premise part),
so the driver keys rows without a tokenizer, and every row of a prefix (in one input chunk) is in one
block, so on one engine, which prefills it once. Any readout runs: the actors call only its protocol. A bucket holds many prefixes so the
engine still gets full windows. `grouping="groupby"` does the same through
`groupby(bucket).map_groups(...)` (a hash shuffle: no scoring starts before every row is rendered).
The output file is the one the single-machine run writes. Ray is imported only when this runs.
"""

from __future__ import annotations

import dataclasses
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import readouts
from ...backends.base import load_tokenizer
from ...config import RunConfig
from ...errors import ConfigError, OpenjevError, OutputCheckError
from ...readouts.base import Readout
from ..formats import count_rows, kept_types
from ..loop import job_manifest
from ..progress import Progress
from ..read import check_input, job_rows
from ..store import OutputStore, part_info
from ..summary import Summary, Totals
from .cluster import RayOptions, _connect, _domain_error, _gpus, _iter_results
from .stages import bucket_of, buckets_per_chunk, stage_schema
from .staging import STAGE_DIR, _records_of, _stage_files, _write_stage, read_stage


@dataclass(frozen=True)
class RaySummary(Summary):
    """`Summary` plus what the Ray run did: rows taken from an earlier run (--resume), engine actors, and
    the non-empty buckets it scored (one planner call on one engine each)."""

    resumed_rows: int = 0
    workers: int = 0
    buckets: int = 0


# -- driver ----------------------------------------------------------------------------------------------
@dataclass
class _Chunk:
    index: int
    start: int
    expected: np.ndarray  # output rows per input row
    done: bool  # its part is already in <out>.partial (resume)


class _Driver:
    """The driver's side of one Ray job: the single-machine writer (parts, manifest, resume), the staged
    rows of earlier runs, the input chunks and the blocks shipped to the actors."""

    def __init__(self, cfg: RunConfig, opts: RayOptions, readout: Readout, progress: Progress | None = None):
        self.cfg, self.opts, self.readout, self.progress = cfg, opts, readout, progress
        self.writer = OutputStore(
            cfg.output,
            cfg.keep,
            job_manifest(cfg, readout),
            cfg.resume,
            kept_types(cfg.input, cfg.keep),
            schema=readout.schema,
        )
        self.schema = stage_schema(readout)
        self.stage = self.writer.partial / STAGE_DIR
        self.stage.mkdir(exist_ok=True)
        for tmp in self.stage.glob("*.tmp"):
            tmp.unlink()
        old = read_stage(self.stage, ["_pos"], self.schema)
        self.run = 1 + max((r for r, _ in _stage_files(self.stage)), default=0)
        self.staged = np.bincount(old.column("_pos").to_numpy()) if old.num_rows else np.zeros(0, int)
        self.chunks: list[_Chunk] = []
        self.refs: list = []
        self.n_rows = self.resumed = self.warm = self.unique = self.n_buckets = 0
        self.used: set[int] = set()  # non-empty buckets

    def ship(self, ray, rows: list, buckets: list[int]) -> None:
        t = {
            "bucket": pa.array(buckets, pa.int64()),
            "pos": pa.array([r.pos for r in rows], pa.int64()),
            "row": pa.array([pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows], pa.binary()),
        }
        self.refs.append(ray.put(pa.table(t)))

    def read_and_ship(self, ray) -> None:
        """Read the input in chunks; ship the rows not finished by an earlier run, bucketed by prefix."""
        cfg, opts, readout = self.cfg, self.opts, self.readout
        rows, digest = job_rows(cfg, readout)  # resume identifies the input by content (store.py)
        for i, chunk in enumerate(rows):
            self.n_rows += len(chunk)
            expected = np.array([readout.n_records(r) for r in chunk], np.int64)
            self.writer.begin_chunk(i, len(chunk), int(expected.sum()), digest.hexdigest())
            done = self.writer.is_done(i)
            self.chunks.append(_Chunk(i, chunk[0].pos, expected, done))
            staged = self.staged
            todo = [] if done else [
                r for r, n in zip(chunk, expected, strict=True) if r.pos >= len(staged) or staged[r.pos] != n
            ]  # fmt: skip
            self.resumed += len(chunk) - len(todo)
            if self.progress is not None:
                self.progress.chunk_read(len(chunk), int(expected.sum()))
                staged_records = int(expected.sum()) - sum(readout.n_records(r) for r in todo)
                self.progress.resumed(len(chunk) - len(todo), staged_records)
            if not todo:
                continue
            k = buckets_per_chunk(len(todo), opts.workers, opts.bucket_rows)
            buckets = [self.n_buckets + bucket_of(readout, r, i, k) for r in todo]  # ids unique across chunks
            self.n_buckets += k
            self.used.update(buckets)
            if opts.grouping == "groupby":
                for j in range(0, len(todo), opts.ship_rows):
                    self.ship(ray, todo[j : j + opts.ship_rows], buckets[j : j + opts.ship_rows])
            else:
                by: dict[int, list] = {}
                for r, b in zip(todo, buckets, strict=True):
                    by.setdefault(b, []).append(r)
                for b, bucket_rows in by.items():
                    self.ship(ray, bucket_rows, [b] * len(bucket_rows))

    def stage_results(self, ray, gpus: float, on_progress: Callable[[int, int], None] | None) -> None:
        """Write the scored blocks as they arrive to the stage folder (what an interrupted run keeps)."""
        it = _iter_results(ray, self.refs, self.cfg, self.readout, self.opts, self.n_buckets, gpus)
        try:
            for seq, batch in enumerate(it):
                if not batch.num_rows:
                    continue
                batch = batch.cast(self.schema) if batch.schema != self.schema else batch
                _write_stage(self.stage, self.run, seq, batch)
                self.warm += int(pc.sum(batch.column("_warm")).as_py() or 0)
                self.unique += int(pc.sum(batch.column("_unique")).as_py() or 0)
                if on_progress:
                    ok = batch.filter(pc.is_null(batch.column("error")))
                    on_progress(ok.num_rows, self.readout.tokens(batch)["branch"])
                if self.progress is not None:
                    t = self.readout.tokens(batch)
                    rows = len(pc.unique(batch.column("_pos")))
                    warm = int(pc.sum(batch.column("_warm")).as_py() or 0)
                    self.progress.branches(batch.num_rows, t["branch"], t["cached"], warm, rows)
        finally:
            close = getattr(it, "close", None)
            if close:
                close()

    def assemble(self) -> tuple[Totals, Path]:
        """Per input chunk, in input order, the staged rows through the single-machine writer; the count
        check per chunk, then over the job. Returns the totals and the output path."""
        table = read_stage(self.stage, schema=self.schema)
        table = table.sort_by([("_pos", "ascending"), ("_qidx", "ascending")])
        pos = table.column("_pos").to_numpy()
        totals = Totals(rows=self.n_rows, expected=int(sum(c.expected.sum() for c in self.chunks)))
        totals.unique = self.unique
        for ch in self.chunks:
            if ch.done:  # a part of an earlier run: its metadata numbers count (part_info)
                part = self.writer.done(ch.index)
                totals.add(self.readout, part, part_info(part))
                totals.resumed.append(ch.index)
                continue
            lo, hi = np.searchsorted(pos, [ch.start, ch.start + len(ch.expected)])
            got = np.bincount(pos[lo:hi] - ch.start, minlength=len(ch.expected))
            if not np.array_equal(got, ch.expected):
                bad = int(np.flatnonzero(got != ch.expected)[0]) + ch.start
                raise OutputCheckError(
                    f"count check failed: input chunk {ch.index} has {int(got.sum())} of its "
                    f"{int(ch.expected.sum())} output rows (first short row: position {bad}); rerun with --resume"
                )
            part = table.slice(lo, hi - lo)
            self.writer.write(ch.index, _records_of(part, self.readout))
            totals.add(self.readout, part)
        totals.check(self.cfg.output, "rerun with --resume")
        return totals, self.writer.close()


def run_job_ray(
    cfg: RunConfig,
    opts: RayOptions | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
) -> RaySummary:
    """Run one job on Ray and return its summary; the output file equals `run_job`'s for the same config.
    `on_progress(branches_done, tokens_done)` is called as each bucket's results arrive (and `progress`
    updated: its total rows counted first when not set). With
    `cfg.resume`, chunks finished by any earlier run (single-machine or Ray) and rows staged by an earlier
    Ray run are not run again. Uses the connected Ray session when there is one (and leaves it open).

    Raises OpenjevError subclasses for job-level failures (Ray missing, bad options, input unreadable,
    an engine actor that cannot start, output count check failed); the partial output is kept for --resume.
    """
    opts = opts or RayOptions()
    t0 = time.perf_counter()
    try:
        import ray
        import ray.data  # noqa: F401 - the [data] extra
    except ImportError as e:
        raise ConfigError(f"--ray needs Ray Data: pip install '.[ray]' in a checkout ({e})") from None
    if opts.workers < 1 or opts.bucket_rows < 1 or opts.ship_rows < 1 or opts.cpus_per_worker < 0:
        raise ConfigError("--workers, bucket_rows and ship_rows must be ≥ 1, cpus_per_worker ≥ 0")
    if opts.grouping not in ("blocks", "groupby"):
        raise ConfigError(f"grouping must be blocks or groupby, got {opts.grouping!r}")
    check_input(cfg.input, cfg.keep)
    readout = readouts.build(cfg.readout, cfg)
    # fail here, not in an actor: the tokenizer loads, gives labels
    readout.prompter(load_tokenizer(cfg.model, cfg.trust_remote_code))
    if progress is not None and progress.total_rows is None:
        progress.total_rows = count_rows(cfg.input, cfg.limit)
    job = _Driver(cfg, opts, readout, progress)
    try:
        return _run(ray, cfg, opts, readout, job, on_progress, t0)
    finally:
        job.writer.release()


def _run(ray, cfg, opts, readout, job: _Driver, on_progress, t0) -> RaySummary:
    started = _connect(ray, opts, opts.render_workers or opts.workers)
    try:
        gpus = _gpus(ray, cfg, opts)
        job.read_and_ship(ray)
        if job.refs:
            job.stage_results(ray, gpus, on_progress)
    except OpenjevError:
        raise
    except Exception as e:  # Ray wraps actor failures (model not loadable, engine dead) in its own errors
        raise _domain_error(e) from e
    finally:
        job.refs.clear()
        if started:
            ray.shutdown()
    totals, out = job.assemble()
    s = totals.summary(job.warm + totals.warm, time.perf_counter() - t0, str(out))
    return RaySummary(
        **{f.name: getattr(s, f.name) for f in dataclasses.fields(Summary)},
        resumed_rows=job.resumed,
        workers=opts.workers,
        buckets=len(job.used),
    )
