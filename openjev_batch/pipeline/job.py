"""The job: read → prompt → plan → prefill → read out → write, chunk by chunk (bounded memory), for any
readout (readouts/): `run` is the label-logprobs readout, `classify` the classifier-head one.

The stage functions `prompt_chunk` and `score_chunk` are what the local loop (`run_job`) and the Ray actors
(scaleout.py) both call. Output order is input order (row by row, a row's records in its order), whatever
order the planner ran the rows in. Every input row appears with `readout.n_records(row)` records, answered
or with its error.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..backends import Backend, load_backend
from ..config import RunConfig, load_questions
from ..errors import ConfigError
from ..model_info import model_info
from ..readouts.base import Readout
from .formats import count_rows, kept_types
from .prefill import FailureTracker
from .progress import Progress
from .read import check_input, job_rows
from .stages import prompt_chunk, score_chunk
from .store import OutputStore, part_info
from .summary import Summary, Totals, describe_model


def make_readout(cfg: RunConfig, labels: tuple[str, ...] | None = None) -> Readout:
    """The readout of a job. classifier-head: `labels` from the backend, else read from the checkpoint's
    config.json (no weights; a checkpoint that is not a classifier is refused here, before any model loads).
    Raises ConfigError / BackendError."""
    if cfg.readout == "classifier-head":
        from ..backends.checkpoint import read_checkpoint
        from ..readouts.classifier_head import DEFAULT_TEMPLATE, ClassifierHead

        if labels is None:
            labels = read_checkpoint(cfg.model).labels
        return ClassifierHead(tuple(labels), cfg.template or DEFAULT_TEMPLATE, cfg.keep)
    from ..readouts.label_logprobs import LabelLogprobs

    if not cfg.questions_file:
        return LabelLogprobs(None, cfg.keep, system_prompt=cfg.system_prompt)
    questions = load_questions(cfg.questions_file)  # raises ConfigError for a missing or bad file
    # the questions' content, not their path: an edited file must not mix old and new answers
    sha = hashlib.sha256(Path(cfg.questions_file).read_bytes()).hexdigest()
    return LabelLogprobs(questions, cfg.keep, sha, cfg.system_prompt)


def job_manifest(cfg: RunConfig, readout: Readout | None = None) -> dict[str, Any]:
    """What identifies a job's partial output; `--resume` continues only a partial with the same manifest
    (single-machine and Ray runs write the same one, so either can resume the other). It holds everything
    that changes the numbers (the model by content, backend, dtype, device, context length, engine settings) so one output
    never mixes precisions, and the readout's own key (the questions by content, or template and labels).
    The input is identified by content too, chunk by chunk as it is read (`store.OutputStore.begin_chunk`),
    not by its path, size or mtime."""
    if (
        readout is None and cfg.readout == "label-logprobs"
    ):  # the key needs the questions' bytes, not their parse
        from ..readouts.label_logprobs import LabelLogprobs

        sha = (
            hashlib.sha256(Path(cfg.questions_file).read_bytes()).hexdigest() if cfg.questions_file else None
        )
        readout = LabelLogprobs(None, cfg.keep, sha, cfg.system_prompt)
    readout = readout or make_readout(cfg)
    from ..backends.weights import model_fingerprint

    return {
        # by content, not path: weights swapped under the same path between a crash and --resume must not
        # continue the old model's partial (hostile trial, issue 25: 300 rows of one model, 900 of another)
        "model content": model_fingerprint(cfg.model),
        "backend": cfg.backend,
        **cfg.resume_key(),  # the engine options that change the numbers (config.ENGINE_OPTIONS)
        "chunk_rows": cfg.chunk_rows,
        "limit": cfg.limit,
        "keep": list(cfg.keep),
        **readout.manifest(),
    }


def _host_stage(chunks, prompter, finished: Callable[[int], bool], digest=None):
    """Yield (index, chunk, its prompted chunk or None when `finished(index)`, the input's sha256 up to the
    chunk's end when `digest` is the hasher the reader feeds) for each input chunk. The host
    stage of chunk i+1 runs in a thread while chunk i is on the engine (the tokenizer's batch calls release
    the GIL). Only that thread touches the reader and the prompter; each chunk is planned and prefilled
    exactly as before, so the output is the same."""

    def host(skip: bool):
        """Read the next chunk and, unless it is already done (--resume), render + tokenize it."""
        chunk = next(chunks, None)
        if chunk is None:
            return None
        sha = digest.hexdigest() if digest is not None else None  # read here, before the next chunk
        return chunk, None if skip else prompt_chunk(chunk, prompter), sha

    pool = ThreadPoolExecutor(1, thread_name_prefix="openjev-host")
    try:
        pending = pool.submit(host, finished(0))
        i = 0
        while (item := pending.result()) is not None:
            pending = pool.submit(host, finished(i + 1))
            yield i, *item
            i += 1
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_job(
    cfg: RunConfig,
    backend: Backend | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Run one job end to end and return its Summary. `backend` may be passed in (tests, eval) and is then
    not closed here. `on_progress(branches_done, tokens_done)` is called after each window; `progress`
    (a live display's counts) is updated as branches finish, its total rows counted first when not set.
    With `cfg.resume`, chunks already in the partial output are not run again; the summary still counts
    the whole job (each part keeps its warm-up and unique tokens) and names them (`resumed_chunks`).

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, output count check failed); the partial output is then kept for `--resume`.

    Length (over ~60 lines): the one job loop, read top to bottom — lock, load, per chunk resume or score
    and write, count check, join; every step is a call into the stage, store or readout modules.
    """
    t0 = time.perf_counter()
    if cfg.output is None:
        raise ConfigError("an output path (-o) is needed; only --dry-run runs without one")
    check_input(cfg.input, cfg.keep)
    own = backend is None
    readout = make_readout(cfg, None if own else backend.labels)
    manifest = job_manifest(cfg, readout)
    # The output is locked before the model loads: a second job on the same -o is refused at once.
    with OutputStore(
        cfg.output,
        cfg.keep,
        manifest,
        cfg.resume,
        kept_types(cfg.input, cfg.keep),
        schema=readout.schema,
    ) as store:
        if progress is not None and progress.total_rows is None:
            progress.total_rows = count_rows(cfg.input, cfg.limit)
        if own:
            backend = load_backend(cfg.backend, cfg.backend_options(cfg.model), readout.backend_kind)
        else:
            backend.configure(cfg)  # this job's request options (--request-pattern, …) on a started backend
        if manifest["model content"].get("revision", "") is None:  # a hub id the loader has just downloaded
            from ..backends.weights import model_fingerprint

            store.amend("model content", model_fingerprint(cfg.model))
        try:
            # Branches longer than the model's (sglang: the engine's) limit are refused in the prompt stage,
            # before any model call.
            prompter = readout.prompter(backend.tokenizer, backend.context_length)
            budget = cfg.kv_budget_tokens or backend.kv_budget_tokens()
            totals = Totals()
            tracker = FailureTracker(
                backend.name,
                partial=f"{cfg.output}.partial",
                kept=lambda: store.rows_written > 0 or bool(totals.resumed),  # a part on disk to resume
            )
            chunks, digest = job_rows(cfg, readout)  # digest: the input's content as read (resume)

            stages = _host_stage(chunks, prompter, lambda i: cfg.resume and store.is_done(i), digest)
            with contextlib.closing(stages):  # the host thread stops with the job, also when it fails
                for i, chunk, prompted, sha in stages:
                    totals.rows += len(chunk)
                    need = sum(readout.n_records(r) for r in chunk)
                    totals.expected += need
                    store.begin_chunk(i, len(chunk), need, sha)  # resuming: refuses a changed input
                    if progress is not None:
                        progress.chunk_read(len(chunk), need)
                    done = store.done(i)
                    if done is None:
                        prompted = prompted or prompt_chunk(chunk, prompter)
                        warm0 = backend.warm_tokens
                        scored = score_chunk(
                            prompted,
                            readout,
                            backend,
                            budget,
                            cfg.max_branches_per_window,
                            on_progress,
                            tracker,
                            progress,
                        )
                        info = {
                            "warm_tokens": backend.warm_tokens - warm0,
                            "unique_tokens": scored.unique_tokens,
                        }
                        store.write(i, scored.records, info)
                        done = store.done(i)
                    else:
                        totals.resumed.append(i)
                        if progress is not None:
                            progress.resumed(len(chunk), need)
                    totals.add(readout, done, part_info(done))
            totals.check(cfg.output, f"delete {Path(cfg.output).name}.partial and rerun")
            out = store.close()  # every part of this job, each with its chunk's records
        finally:
            if own:
                backend.close()
    return totals.summary(
        totals.warm,
        time.perf_counter() - t0,
        str(out),
        model=describe_model(getattr(backend, "model_info", None) or model_info(cfg.model)),
        pattern=getattr(backend, "pattern", ""),
        startup=getattr(backend, "startup", "") if own else "",
    )
