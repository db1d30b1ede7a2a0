"""Scale-out on Ray Data: the job of `pipeline.run_job`, scored by a pool of engine actors.

    driver       read_rows (input order, row errors, duplicate ids, --resume); bucket of each row =
                 hash(its prefix text, input chunk) mod n ─▶ one object-store block per bucket
    CPU actors   pipeline.prompt_chunk (render + tokenize), block by block
    GPU actors   one backend each (one sglang.Engine); a block = a bucket → pipeline.score_chunk
                 (plan → prefill with fault isolation → read out), the single-machine stage functions
    driver       result blocks ─▶ <out>.partial/ray/*.parquet as they arrive ─▶ per input chunk, in input
                 order, through io.ResultWriter (the same parts, manifest, count check and --resume as a
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
import hashlib
import logging
import math
import os
import pickle
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import errors
from .backends import load_backend
from .config import RunConfig
from .errors import BackendError, ConfigError, OpenjevError, OutputCheckError
from .io import ResultWriter, check_input, read_rows
from .pipeline import Prompted, Summary, Totals, job_manifest, make_readout, prompt_chunk, score_chunk
from .readouts.base import Readout
from .schema import RowError

STAGE_DIR = "ray"  # under <out>.partial/
_EXTRA = [("_pos", pa.int64()), ("_qidx", pa.int32()), ("_kept", pa.binary()), ("_warm", pa.int64()),
          ("_unique", pa.int64())]  # fmt: skip


def stage_schema(readout: Readout) -> pa.Schema:
    """The staged files' columns: the readout's output columns, then the driver's bookkeeping."""
    return pa.schema(list(readout.schema) + [pa.field(n, t) for n, t in _EXTRA])


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


@dataclass(frozen=True)
class RaySummary(Summary):
    """`Summary` plus what the Ray run did: rows taken from an earlier run (--resume), engine actors, and
    the non-empty buckets it scored (one planner call on one engine each)."""

    resumed_rows: int = 0
    workers: int = 0
    buckets: int = 0


def bucket_of(readout: Readout, row, chunk: int, n_buckets: int) -> int:
    """Bucket of a row within its input chunk, deterministic across processes and runs. Rows with the
    same prefix share one (`readout.prefix_key`). The chunk number splits a prefix shared by several
    chunks, as the single-machine planner does (one prefill per chunk). Row errors (nothing to prefill)
    are spread by position."""
    if isinstance(row, RowError):
        return row.pos % n_buckets
    h = hashlib.blake2b(readout.prefix_key(row).encode("utf-8", "surrogatepass"), digest_size=8)
    h.update(int(chunk).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little") % n_buckets


def buckets_per_chunk(n_rows: int, workers: int, bucket_rows: int) -> int:
    """Enough buckets to keep every worker busy (4 each) and to hold about `bucket_rows` rows each."""
    return max(math.ceil(n_rows / bucket_rows), min(n_rows, 4 * workers), 1)


def _tokenizer(model: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model)
    except Exception as e:
        raise BackendError(f"cannot load the tokenizer of {model!r}: {e}") from e


# -- Ray stages (run in actors; plain classes so Ray imports this module by name) ----------------------
class RenderStage:
    """CPU actor: the prompt stage (`pipeline.prompt_chunk`) over a block of rows (block in, block out:
    per row, the row with its prompt and its failed questions)."""

    def __init__(self, model: str, readout: Readout):
        self.prompter = readout.prompter(_tokenizer(model))

    def __call__(self, block: pa.Table) -> pa.Table:
        rows = [pickle.loads(b) for b in block.column("row").to_pylist()]
        p = prompt_chunk(rows, self.prompter)
        prompts = {rp.pos: rp for rp in p.prompts}
        payload = [
            pickle.dumps((r, prompts.get(r.pos), p.failed.get(r.pos, {})), protocol=pickle.HIGHEST_PROTOCOL)
            for r in rows
        ]
        return pa.table(
            {
                "bucket": block.column("bucket"),
                "pos": block.column("pos"),
                "payload": pa.array(payload, pa.binary()),
            }
        )


class ScoreStage:
    """Engine actor: one backend for its lifetime; each call scores one bucket (a block, or a group) with
    the single-machine stage function `pipeline.score_chunk` → staged output rows."""

    def __init__(self, cfg: RunConfig, readout: Readout):
        self.cfg, self.readout = cfg, readout
        self.backend = load_backend(cfg.backend, cfg.backend_options(cfg.model), readout.backend_kind)
        self.budget = cfg.kv_budget_tokens or self.backend.kv_budget_tokens()

    def __call__(self, group: pa.Table) -> pa.Table:
        items = sorted(
            (pickle.loads(b) for b in group.column("payload").to_pylist()), key=lambda it: it[0].pos
        )
        chunk = Prompted(
            [it[0] for it in items],
            [it[1] for it in items if it[1] is not None],
            {it[0].pos: it[2] for it in items if it[2]},
        )
        warm0 = self.backend.warm_tokens
        scored = score_chunk(chunk, self.readout, self.backend, self.budget, self.cfg.max_branches_per_window)
        return stage_table(
            scored.records, chunk.rows, self.readout, self.backend.warm_tokens - warm0, scored.unique_tokens
        )

    def __del__(self):
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


def stage_table(
    records: list[dict[str, Any]], rows: list, readout: Readout, warm: int, unique: int
) -> pa.Table:
    """Records of `rows` (in their order) → a staged table: the output columns, input position and
    record index (to restore input order), kept values (pickled: any type survives until the final
    writer infers it, as in a single-machine run), the backend's warm-up tokens and the planner's unique
    tokens (on the first row)."""
    pos = [r.pos for r in rows for _ in range(readout.n_records(r))]
    qidx = [i for r in rows for i in range(readout.n_records(r))]
    if len(pos) != len(records):
        raise RuntimeError(f"{len(records)} records for {len(rows)} rows that need {len(pos)}")
    cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in readout.schema}
    cols["_pos"] = pa.array(pos, pa.int64())
    cols["_qidx"] = pa.array(qidx, pa.int32())
    cols["_kept"] = pa.array([pickle.dumps({k: r[k] for k in readout.keep}) for r in records], pa.binary())
    first = [i == 0 for i in range(len(records))]
    cols["_warm"] = pa.array([warm if f else 0 for f in first], pa.int64())
    cols["_unique"] = pa.array([unique if f else 0 for f in first], pa.int64())
    return pa.table(cols, schema=stage_schema(readout))


# -- staging (<out>.partial/ray/r<run>-<seq>.parquet) ----------------------------------------------------
def _stage_files(stage: Path) -> list[tuple[int, Path]]:
    out = []
    for p in sorted(stage.glob("r*-*.parquet")):
        try:
            out.append((int(p.name[1:].split("-")[0]), p))
        except ValueError:
            continue
    return out


def read_stage(stage: Path, columns: list[str] | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """Staged rows of every earlier run with a `_run` column; for each input position only the rows of
    the latest run that has it (an older, partial attempt at a row is superseded). `schema`: the staged
    files' schema, for the empty table when there are none."""
    cols = None if columns is None else sorted(set(columns) | {"_pos"})
    tables = []
    for run, p in _stage_files(stage):
        t = pq.read_table(p, columns=cols)
        tables.append(t.append_column("_run", pa.array(np.full(t.num_rows, run, np.int64))))
    if not tables:
        full = schema if schema is not None else pa.schema([pa.field(n, t) for n, t in _EXTRA])
        schema = full if cols is None else pa.schema([full.field(c) for c in cols])
        return schema.empty_table().append_column("_run", pa.array([], pa.int64()))
    t = pa.concat_tables(tables)
    pos, runs = t.column("_pos").to_numpy(), t.column("_run").to_numpy()
    latest = np.zeros(int(pos.max()) + 1, np.int64)
    np.maximum.at(latest, pos, runs)
    return t.filter(pa.array(runs == latest[pos]))


def _write_stage(stage: Path, run: int, seq: int, table: pa.Table) -> None:
    p = stage / f"r{run:04d}-{seq:06d}.parquet"
    tmp = p.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, p)  # a staged file is complete or absent


def _records_of(table: pa.Table, readout: Readout) -> list[dict[str, Any]]:
    recs = table.select(readout.schema.names + ["_kept"]).to_pylist()
    for r in recs:
        r.update(pickle.loads(r.pop("_kept")))
    return recs


# -- driver ----------------------------------------------------------------------------------------------
@dataclass
class _Chunk:
    index: int
    start: int
    expected: np.ndarray  # output rows per input row
    done: bool  # its part is already in <out>.partial (resume)


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


def _gpus(ray, cfg: RunConfig, opts: RayOptions) -> float:
    if opts.gpus_per_worker is not None:
        g = opts.gpus_per_worker
    elif cfg.device == "cpu" or not ray.cluster_resources().get("GPU", 0):
        g = 0
    else:
        g = cfg.tp_size * cfg.dp_size if cfg.backend == "sglang" else 1
    if g < 0:
        raise ConfigError("--gpus-per-worker must be ≥ 0")
    have = ray.cluster_resources().get("GPU", 0)
    if g and opts.workers * g > have:
        raise ConfigError(
            f"--workers {opts.workers} × --gpus-per-worker {g:g} needs {opts.workers * g:g} GPUs; "
            f"the Ray cluster has {have:g}"
        )
    if g and cfg.backend == "sglang" and cfg.tp_size * cfg.dp_size > g:
        raise ConfigError(
            f"sglang with tp_size {cfg.tp_size} × dp_size {cfg.dp_size} needs "
            f"{cfg.tp_size * cfg.dp_size} GPUs per worker; --gpus-per-worker is {g:g}"
        )
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
        fn_constructor_kwargs={"model": cfg.model, "readout": readout},
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
        ds = (internal if gpus else ds.map_batches)(ScoreStage, batch_size=None, **score)
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


def run_job_ray(
    cfg: RunConfig, opts: RayOptions | None = None, on_progress: Callable[[int, int], None] | None = None
) -> RaySummary:
    """Run one job on Ray and return its summary; the output file equals `run_job`'s for the same config.
    `on_progress(branches_done, tokens_done)` is called as each bucket's results arrive. With
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
    readout = make_readout(cfg)
    readout.prompter(
        _tokenizer(cfg.model)
    )  # fail here, not in an actor: the tokenizer loads (and gives labels)
    writer = ResultWriter(
        cfg.output, cfg.keep, job_manifest(cfg, readout), resume=cfg.resume, schema=readout.schema
    )
    schema = stage_schema(readout)
    stage = writer.partial / STAGE_DIR
    stage.mkdir(exist_ok=True)
    for tmp in stage.glob("*.tmp"):
        tmp.unlink()
    old = read_stage(stage, ["_pos"], schema)
    run = 1 + max((r for r, _ in _stage_files(stage)), default=0)
    staged = np.bincount(old.column("_pos").to_numpy(), minlength=0) if old.num_rows else np.zeros(0, int)

    chunks: list[_Chunk] = []
    refs: list = []
    n_rows = resumed = warm = unique = n_buckets = 0
    used: set[int] = set()  # non-empty buckets
    started = _connect(ray, opts, opts.render_workers or opts.workers)
    try:
        gpus = _gpus(ray, cfg, opts)

        def ship(rows: list, buckets: list[int]) -> None:
            t = {
                "bucket": pa.array(buckets, pa.int64()),
                "pos": pa.array([r.pos for r in rows], pa.int64()),
                "row": pa.array(
                    [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows], pa.binary()
                ),
            }
            refs.append(ray.put(pa.table(t)))

        for i, chunk in enumerate(
            read_rows(cfg.input, keep=cfg.keep, chunk_rows=cfg.chunk_rows, limit=cfg.limit, readout=readout)
        ):
            n_rows += len(chunk)
            expected = np.array([readout.n_records(r) for r in chunk], np.int64)
            done = cfg.resume and writer.part(i).exists()
            chunks.append(_Chunk(i, chunk[0].pos, expected, done))
            if done:
                resumed += len(chunk)
                continue
            todo = [
                r for r, n in zip(chunk, expected, strict=True) if r.pos >= len(staged) or staged[r.pos] != n
            ]
            resumed += len(chunk) - len(todo)
            if not todo:
                continue
            k = buckets_per_chunk(len(todo), opts.workers, opts.bucket_rows)
            buckets = [n_buckets + bucket_of(readout, r, i, k) for r in todo]  # ids unique across chunks
            n_buckets += k
            used.update(buckets)
            if opts.grouping == "groupby":
                for j in range(0, len(todo), opts.ship_rows):
                    ship(todo[j : j + opts.ship_rows], buckets[j : j + opts.ship_rows])
            else:
                by: dict[int, list] = {}
                for r, b in zip(todo, buckets, strict=True):
                    by.setdefault(b, []).append(r)
                for b, rows in by.items():
                    ship(rows, [b] * len(rows))
        if refs:
            it = _iter_results(ray, refs, cfg, readout, opts, n_buckets, gpus)
            try:
                for seq, batch in enumerate(it):
                    if not batch.num_rows:
                        continue
                    batch = batch.cast(schema) if batch.schema != schema else batch
                    _write_stage(stage, run, seq, batch)
                    warm += int(pc.sum(batch.column("_warm")).as_py() or 0)
                    unique += int(pc.sum(batch.column("_unique")).as_py() or 0)
                    if on_progress:
                        ok = batch.filter(pc.is_null(batch.column("error")))
                        on_progress(ok.num_rows, readout.tokens(batch)["branch"])
            finally:
                close = getattr(it, "close", None)
                if close:
                    close()
    except OpenjevError:
        raise
    except Exception as e:  # Ray wraps actor failures (model not loadable, engine dead) in its own errors
        raise _domain_error(e) from e
    finally:
        refs.clear()
        if started:
            ray.shutdown()

    # assemble: per input chunk, in input order, through the single-machine writer
    table = read_stage(stage, schema=schema)
    table = table.sort_by([("_pos", "ascending"), ("_qidx", "ascending")])
    pos = table.column("_pos").to_numpy()
    totals = Totals(rows=n_rows, expected=int(sum(c.expected.sum() for c in chunks)), unique=unique)
    for ch in chunks:
        if ch.done:
            totals.add(readout, writer.done(ch.index))
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
        writer.write(ch.index, _records_of(part, readout))
        totals.add(readout, part)
    totals.check(cfg.output, "rerun with --resume")
    out = writer.close()
    s = totals.summary(warm, time.perf_counter() - t0, str(out))
    return RaySummary(
        **{f.name: getattr(s, f.name) for f in dataclasses.fields(Summary)},
        resumed_rows=resumed,
        workers=opts.workers,
        buckets=len(used),
    )
