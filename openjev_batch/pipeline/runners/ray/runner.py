"""The Ray runner (`--ray`): the one loop's chunks (pipeline/loop.py) scored by a pool of engine actors on
Ray Data. The loop keeps the job's bookkeeping (skip-if-done, ledger, progress, totals, the count check, the
join); this runner only decides where `score_chunk` runs.

    loop         the chunks still to do, in input order
    runner       rows an earlier Ray run staged are done; the rest bucketed: bucket of a row =
                 hash(its prefix text, input chunk) mod n ─▶ one object-store block per bucket
    CPU actors   pipeline.prompt_chunk (render + tokenize), block by block
    GPU actors   one backend each (one sglang.Engine); a block = a bucket → pipeline.score_chunk
                 (plan → prefill with fault isolation → read out), the single-machine stage functions
    runner       result blocks ─▶ <out>.partial/ray/*.parquet as they arrive (staging.py: an interrupted
                 run resumes from them) ─▶ a chunk, once all its records are back, to the loop (in any
                 order: the store joins its parts by chunk index)

Rows are bucketed by `readout.prefix_key(row)`, text that is equal exactly when two rows share their whole
prefix (label-logprobs: the conversation under the fixed instructions; classifier-head: the premise part),
so rows are keyed without a tokenizer, and every row of a prefix (in one input chunk) is in one block, so
on one engine, which prefills it once. A bucket holds many prefixes so the engine still gets full windows.
`grouping="groupby"` does the same through `groupby(bucket).map_groups(...)` (a hash shuffle: no scoring
starts before every row is rendered). The output file is the one the local runner's job writes. Ray is
imported only when this runs.
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....backends import tokenizer_name
from ....backends.base import load_tokenizer
from ....errors import ConfigError, OpenjevError
from ....readouts.base import Readout
from ...prefill import FailureTracker
from ...progress import Progress
from ...summary import Summary
from ..streams import OnProgress, Scored, Todo
from .cluster import RayOptions, _connect, _domain_error, _gpus, _iter_results
from .stages import bucket_of, buckets_per_chunk, stage_schema
from .staging import _records_of, _stage_files, _write_stage, read_stage, stage_dir

if TYPE_CHECKING:
    from ....config import RunConfig


@dataclass(frozen=True)
class RaySummary(Summary):
    """`Summary` plus what the Ray runner did: engine actors, the non-empty buckets it scored (one planner
    call on one engine each) and the rows its actors scored."""

    workers: int = 0
    buckets: int = 0
    shipped_rows: int = 0

    @property
    def resumed_rows(self) -> int:
        """Rows taken from an earlier run (--resume): its finished chunks and the rows it staged (not the
        rows --reuse copied from earlier outputs)."""
        return self.rows - self.shipped_rows - (self.reused_rows or 0)


@dataclass
class _Pending:
    """A chunk on the actors: its records still to come, and its staged rows so far."""

    index: int
    start: int
    missing: int
    tables: list = field(default_factory=list)


class RayRunner:
    """Scores the loop's chunks on a Ray cluster (`opts`: how the job spreads). Uses the connected Ray
    session when there is one (and leaves it open), else starts one for the job. Raises ConfigError when
    Ray Data is missing or an option is out of range."""

    summary_type = RaySummary
    labels = None  # a classifier's labels are read from its config.json (readouts.build)

    def __init__(self, opts: RayOptions | None = None):
        self.opts = opts = opts or RayOptions()
        try:
            import ray
            import ray.data  # noqa: F401 - the [data] extra
        except ImportError as e:
            raise ConfigError(f"--ray needs Ray Data: pip install '.[ray]' in a checkout ({e})") from None
        self.ray = ray
        if opts.workers < 1 or opts.bucket_rows < 1 or opts.ship_rows < 1 or opts.cpus_per_worker < 0:
            raise ConfigError("--workers, bucket_rows and ship_rows must be ≥ 1, cpus_per_worker ≥ 0")
        if opts.grouping not in ("blocks", "groupby"):
            raise ConfigError(f"grouping must be blocks or groupby, got {opts.grouping!r}")
        self.results: Iterator | None = None  # the Ray Data iterator while results stream

    @property
    def name(self) -> str:
        return self.cfg.backend

    @contextlib.contextmanager
    def open(self, cfg: RunConfig, readout: Readout):
        """The staged rows of earlier runs read, the cluster joined (or started: shut down after)."""
        if cfg.output is None:
            raise ConfigError("--ray needs an output path (-o): its staged rows live next to it")
        tokenizer = load_tokenizer(cfg.model, cfg.trust_remote_code)
        readout.prompter(tokenizer)  # fails here, not in an actor
        self.tokenizer_name = tokenizer_name(tokenizer)  # the actors load the same (load_tokenizer)
        self.cfg, self.readout, self.schema = cfg, readout, stage_schema(readout)
        self._read_stage()
        self.shipped = self.n_buckets = 0
        self.used: set[int] = set()  # non-empty buckets
        ray, opts = self.ray, self.opts
        try:
            started = _connect(ray, opts, opts.render_workers or opts.workers)
        except Exception as e:  # an address that does not answer, a cluster that cannot start
            raise _domain_error(e) from e
        try:
            self.gpus = _gpus(ray.cluster_resources().get("GPU", 0), cfg, opts)
            yield self
        finally:
            self._close_results()
            if started:
                ray.shutdown()

    def _read_stage(self) -> None:
        """The rows staged by earlier Ray runs of this job (the store removed another job's), input order."""
        self.stage = stage_dir(cast(Path, self.cfg.output))  # a job that writes (--dry-run runs no Ray job)
        self.stage.mkdir(exist_ok=True)
        for tmp in self.stage.glob("*.tmp"):
            tmp.unlink()
        old = read_stage(self.stage, schema=self.schema).drop_columns(["_run"])
        self.run = 1 + max((r for r, _ in _stage_files(self.stage)), default=0)
        self.old = old.sort_by([("_pos", "ascending"), ("_qidx", "ascending")])
        self.old_pos = self.old.column("_pos").to_numpy()
        self.staged = np.bincount(self.old_pos) if old.num_rows else np.zeros(0, int)

    def describe(self) -> dict[str, Any]:
        # the backend by name: each worker resolves its own device, on its own host
        return {"backend": f"{self.cfg.backend} on the Ray workers", "tokenizer": self.tokenizer_name,
                "workers": self.opts.workers, "buckets": len(self.used),
                "shipped_rows": self.shipped}  # fmt: skip

    def score(self, todo: Todo, tracker: FailureTracker, progress: Progress | None = None,
              on_progress: OnProgress | None = None) -> Scored:  # fmt: skip
        """Ship every chunk of `todo` (its rows not staged by an earlier run) to the actors, then yield each
        chunk as its last records come back. `on_progress(branches, tokens)` and `progress` as each
        bucket's results arrive. `tracker` is not used here: each engine actor keeps its own
        (stages.ScoreStage), as the loop's lives in this process."""
        refs: list = []
        pending: dict[int, _Pending] = {}
        try:
            for i, rows in todo:
                if (finished := self._ship(i, rows, refs, pending, progress)) is not None:
                    yield finished  # every row staged by an earlier run
            if refs:
                yield from self._collect(refs, pending, progress, on_progress)
        except OpenjevError:
            raise
        except Exception as e:  # as in open(): an actor's error, recovered from Ray's wrapper
            raise _domain_error(e) from e
        finally:
            refs.clear()
            self._close_results()

    def _ship(self, i: int, rows: list, refs: list, pending: dict, progress: Progress | None):
        """Chunk `i`'s rows not staged by an earlier run, bucketed by prefix, into the object store.
        Returns the chunk, finished, when an earlier run staged all of it."""
        readout, opts, staged = self.readout, self.opts, self.staged
        expected = [readout.n_records(r) for r in rows]
        todo = [r for r, n in zip(rows, expected, strict=True) if r.pos >= len(staged) or staged[r.pos] != n]
        # `rows` may have gaps (--reuse: the loop took the copied rows out): the staged rows of exactly these
        # positions, not of the range they span; a row an earlier run left short is scored again, whole
        lo, hi = np.searchsorted(self.old_pos, [rows[0].pos, rows[-1].pos + 1])
        done = {r.pos for r in rows}.difference(r.pos for r in todo)
        old = self.old.slice(lo, hi - lo).filter(pa.array(np.isin(self.old_pos[lo:hi], list(done))))
        if progress is not None and len(todo) < len(rows):
            progress.resumed(len(rows) - len(todo), old.num_rows)
        if not todo:
            return self._finished(i, [old])
        self.shipped += len(todo)
        pending[i] = _Pending(i, rows[0].pos, sum(readout.n_records(r) for r in todo), [old])
        k = buckets_per_chunk(len(todo), opts.workers, opts.bucket_rows)
        buckets = [self.n_buckets + bucket_of(readout, r, i, k) for r in todo]  # ids unique across chunks
        self.n_buckets += k
        self.used.update(buckets)
        if opts.grouping == "groupby":
            for j in range(0, len(todo), opts.ship_rows):
                refs.append(self._block(todo[j : j + opts.ship_rows], buckets[j : j + opts.ship_rows]))
        else:
            by: dict[int, list] = {}
            for r, b in zip(todo, buckets, strict=True):
                by.setdefault(b, []).append(r)
            refs.extend(self._block(bucket_rows, [b] * len(bucket_rows)) for b, bucket_rows in by.items())
        return None

    def _block(self, rows: list, buckets: list[int]):
        t = {
            "bucket": pa.array(buckets, pa.int64()),
            "pos": pa.array([r.pos for r in rows], pa.int64()),
            "row": pa.array([pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows], pa.binary()),
        }
        return self.ray.put(pa.table(t))

    def _collect(self, refs: list, pending: dict, progress: Progress | None, on_progress) -> Iterator:
        """Stage the scored blocks as they arrive (what an interrupted run keeps); yield each chunk whose
        records are all back. A chunk left short is never yielded: the loop's count check names it."""
        it = self.results = _iter_results(
            self.ray, refs, self.cfg, self.readout, self.opts, self.n_buckets, self.gpus
        )
        starts = np.array(sorted(p.start for p in pending.values()), np.int64)
        by_start = {p.start: p for p in pending.values()}
        for seq, batch in enumerate(it):
            if not batch.num_rows:
                continue
            batch = batch.cast(self.schema) if batch.schema != self.schema else batch
            _write_stage(self.stage, self.run, seq, batch)
            self._report(batch, progress, on_progress)
            pos = batch.column("_pos").to_numpy()
            owner = starts[np.searchsorted(starts, pos, side="right") - 1]  # the chunk of each record
            for start in np.unique(owner):
                p = by_start[int(start)]
                part = batch.filter(pa.array(owner == start))
                p.tables.append(part)
                p.missing -= part.num_rows
                if p.missing == 0:
                    del pending[p.index]
                    yield self._finished(p.index, p.tables)

    def _finished(self, i: int, tables: list) -> tuple[int, list[dict[str, Any]], dict[str, int]]:
        """Chunk `i`'s records in input order, with its warm-up and planned unique tokens (each bucket keeps
        them on its first row)."""
        t = pa.concat_tables(tables).sort_by([("_pos", "ascending"), ("_qidx", "ascending")])
        warm, unique = (int(pc.sum(t.column(c)).as_py() or 0) for c in ("_warm", "_unique"))
        return i, _records_of(t, self.readout), {"warm_tokens": warm, "unique_tokens": unique}

    def _report(self, batch: pa.Table, progress: Progress | None, on_progress) -> None:
        if on_progress:
            ok = batch.filter(pc.is_null(batch.column("error")))
            on_progress(ok.num_rows, self.readout.tokens(batch)["branch"])
        if progress is not None:
            t = self.readout.tokens(batch)
            rows = len(pc.unique(batch.column("_pos")))
            warm = int(pc.sum(batch.column("_warm")).as_py() or 0)
            progress.branches(batch.num_rows, t["branch"], t["cached"], warm, rows)

    def _close_results(self) -> None:
        it, self.results = self.results, None
        if (close := getattr(it, "close", None)) is not None:
            close()
