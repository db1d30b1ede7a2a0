"""The one job loop: every job, whatever reads it, runs it or keeps its output, is
`run(cfg, source, sink, runner)`.

    source (input/source.py: a file, a DataFrame) ──chunks of rows──▶ loop ──chunks to do──▶ runner
    (runners/: a backend in-process, or the tokenizer or parser alone) ──(index, records, info)──▶ loop
    ──▶ sink (output/sink.py: the output store, an in-memory table, nowhere)

The loop owns the job's bookkeeping, so it exists once: skip-if-done (`--resume`), the input ledger, live
progress, the totals of the summary, one FailureTracker for the whole job, the count check and the join. Output
order is input order (the sink joins parts by chunk index, whatever order a runner finished them in); every
input row has `readout.n_records(row)` records, answered or with its error.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import readouts
from ..backends import SPECS
from ..checkpoint.weights import model_fingerprint
from ..config import RunConfig
from ..readouts.base import Readout
from .input.source import Source
from .output.sink import Output, Sink
from .output.store import part_info
from .prefill import FailureTracker
from .progress import Progress
from .reuse import ChunkPlan, Keys
from .runners import Runner
from .summary import Summary, Totals


def job_manifest(cfg: RunConfig, readout: Readout | None = None) -> dict[str, Any]:
    """What identifies a job's partial output; `--resume` continues only a partial with the same manifest
    (single-machine and Ray runs write the same one, so either can resume the other). It holds everything
    that changes the numbers (the model by content, backend, dtype, device, context length, engine settings)
    so one output never mixes precisions, and the readout's own key (the questions by content, or template
    and labels). The input is identified by content too, chunk by chunk as it is read
    (`store.OutputStore.begin_chunk`), not by its path, size or mtime."""
    readout = readout or readouts.build(cfg.readout, cfg)
    return {
        # by content, not path: weights swapped under the same path between a crash and --resume must not
        # continue the old model's partial (hostile trial, issue 25: 300 rows of one model, 900 of another)
        "model content": model_fingerprint(cfg.model),
        "backend": cfg.backend,
        **cfg.resume_key(),  # the engine options that change the numbers (options.ENGINE_OPTIONS)
        "chunk_rows": cfg.chunk_rows,
        "limit": cfg.limit,
        "keep": list(cfg.keep),
        **readout.manifest(),
    }


def run(
    cfg: RunConfig,
    source: Source,
    sink: Sink,
    runner: Runner,
    *,
    readout: Readout | None = None,
    progress: Progress | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    reuse: Any = None,
) -> tuple[Summary, Any]:
    """Run one job end to end. Returns its Summary and what the sink's `close()` gave (the output path, the
    in-memory table). `readout`: the job's, else built from `cfg` by the registry (classifier-head: with the
    runner's labels). `progress` (a live display's counts) is updated as branches finish, its total rows
    counted first when not set; `on_progress(branches_done, tokens_done)` is called after each window.
    With `cfg.resume`, chunks the sink already holds are not run again; the summary still counts the whole
    job (each part keeps its warm-up and unique tokens) and names them (`resumed_chunks`). A finished
    output this job made from this input raises OutputFinished (nothing to do), before any model loads.
    A sink that keeps answer keys gets each record's (reuse.py); `reuse` (default `cfg.reuse`): earlier
    outputs (paths, the API's tables) whose rows of the same answer key are copied, not computed.

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, count check failed); a store's partial output is then kept for `--resume`.
    """
    t0 = time.perf_counter()
    source.check()  # before any model loads
    readout = readout or readouts.build(cfg.readout, cfg, runner.labels)
    manifest = job_manifest(cfg, readout) if cfg.output is not None and sink.keeps_manifest else {}
    totals = Totals()
    lock = threading.Lock()  # the runner's host thread reads (todo) while this one writes
    # A store is locked before the model loads: a second job on the same -o is refused at once.
    with sink.open(manifest, readout) as out:
        if cfg.resume:  # OutputFinished: this job made the output (a store's check; the others have none)
            out.check_finished(sha for _, sha in source.chunks(readout))
        if progress is not None and progress.total_rows is None:
            progress.total_rows = source.count_rows()

        with runner.open(cfg, readout) as r:
            _record_downloaded_model(cfg, manifest, out)
            if name := getattr(r, "tokenizer_name", ""):  # known once loaded: which class tokenizes
                out.amend("tokenizer", name)
            keys = _keys(cfg, readout, manifest, sink, reuse, out)
            tracker = FailureTracker(  # one per job: the evidence of a broken backend spans chunks
                r.name,
                partial=None if out.partial is None else str(out.partial),
                kept=lambda: out.rows_written > 0 or bool(totals.resumed),  # a part on disk to resume
            )
            plans: dict[int, ChunkPlan] = {}  # the chunks on the runner, with their copied rows
            chunks = _todo(cfg, source, readout, out, totals, lock, progress, keys, plans)
            with contextlib.closing(chunks):  # the reader stops with the job, also when it fails
                for i, records, info in r.score(chunks, tracker, progress, on_progress):
                    with lock:
                        _write(out, totals, readout, i, records, info, plans.pop(i, None))
            totals.check(cfg.output, _fix(out))  # the count check: every row has all its records
            if keys is not None and keys.files:
                out.amend("reused", keys.files)  # with the rows taken from each
            result = out.close()  # the join (a store also checks its parts on disk)
            extra = r.describe()
    return _summary(totals, keys, runner, time.perf_counter() - t0, result, extra), result


def _summary(totals: Totals, keys: Keys | None, runner: Runner, wall_s: float, result: Any, extra: dict) -> Summary:
    where = str(result) if isinstance(result, Path) else ""  # a file's path; an in-memory table has none
    if keys is not None and keys.previous is not None:  # --reuse: rows copied, and why a file gave none
        extra = {**extra, "reused_rows": totals.reused, "reuse_notes": keys.notes}
    # each runner names its Summary class: the Ray runner's adds its actors and buckets
    return totals.summary(totals.warm, wall_s, where, runner.summary_type, **extra)


def _keys(cfg: RunConfig, readout: Readout, manifest: dict, sink: Sink, reuse: Any, out: Output) -> Keys | None:
    """The job's answer keys (None: its sink keeps none), computed once the model loaded (a hub id's
    revision is known then), with the earlier outputs it copies from (named in the output's manifest)."""
    if not getattr(sink, "keeps_keys", False):
        return None
    if not manifest or manifest.get("model content", {}).get("revision", "") is None:
        manifest = job_manifest(cfg, readout)
    device = SPECS[cfg.backend].device(cfg)  # `auto` as resolved here: cpu and cuda numbers differ
    keys = Keys(manifest, readout, cfg.reuse if reuse is None else reuse, device)
    out.amend("answer_job", keys.job)
    if keys.files:
        out.amend("reused", keys.files)  # the files copied from (their counts: once the job ends)
    return keys


def _write(out: Output, totals: Totals, readout: Readout, i: int, records: Any, info: dict | None,
           plan: ChunkPlan | None) -> None:  # fmt: skip
    """Write chunk `i`'s part and count it; `plan`: the chunk under answer keys (its copied rows merged
    with the runner's `records`, every record given its key)."""
    if plan is not None:
        records, info = plan.merge(records), {**(info or {}), **plan.info()}
    out.write(i, records, info)
    totals.add(readout, out.done(i), info)


def _todo(cfg: RunConfig, source: Source, readout: Readout, out: Output, totals: Totals, lock: threading.Lock,
          progress, keys: Keys | None = None, plans: dict | None = None):  # fmt: skip
    """The chunks still to do, (index, rows): skip-if-done once, for every runner. Each chunk read enters
    the ledger (resuming: a changed input is refused) and the totals; a chunk the sink already holds is
    counted from its part and not yielded. With `keys`, a chunk's rows copied from an earlier output are not
    yielded (its plan goes to `plans` for the merge; a chunk copied whole is written here). Runs in the
    runner's host thread, hence `lock`."""
    for i, (chunk, sha) in enumerate(source.chunks(readout)):
        need = sum(readout.n_records(r) for r in chunk)
        with lock:
            totals.rows += len(chunk)
            totals.expected += need
            out.begin_chunk(i, len(chunk), need, sha)
            if progress is not None:
                progress.chunk_read(len(chunk), need)
            part = out.done(i) if cfg.resume else None
            if part is not None:
                totals.resumed.append(i)
                totals.add(readout, part, _part_info(part))
                if progress is not None:
                    progress.resumed(len(chunk), need)
        if part is None and keys is not None and plans is not None:
            plan = keys.plan(chunk)
            if plan.reused_rows and progress is not None:
                progress.resumed(plan.reused_rows, sum(len(c) for c in plan.copied if c is not None))
            if todo := plan.todo:
                plans[i] = plan
                yield i, todo
            else:  # every row copied: nothing for the runner
                with lock:
                    _write(out, totals, readout, i, [], None, plan)
        elif part is None:
            yield i, chunk


def _part_info(part) -> dict[str, int]:
    return part_info(part)


def _fix(out) -> str:
    return "rerun" if out.partial is None else f"delete {Path(out.partial).name} and rerun"


def _record_downloaded_model(cfg: RunConfig, manifest: dict, out) -> None:
    """A hub id the loader has just downloaded: its revision is known now, so the key a resume computes
    matches the manifest."""
    if manifest.get("model content", {}).get("revision", "") is None:
        out.amend("model content", model_fingerprint(cfg.model))
