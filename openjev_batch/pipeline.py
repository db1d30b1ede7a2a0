"""The job: read → prompt → plan → prefill → read out → write, chunk by chunk (bounded memory), for any
readout (readouts/): `run` is the label-logprobs readout, `classify` the classifier-head one.

The stage functions `prompt_chunk` and `score_chunk` are what the local loop (`run_job`) and the Ray actors
(scaleout.py) both call. Output order is input order (row by row, a row's records in its order), whatever
order the planner ran the rows in. Every input row appears with `readout.n_records(row)` records, answered
or with its error.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .backends import Backend, BranchResult, load_backend
from .config import RunConfig, load_questions
from .errors import BackendError, ConfigError, OutputCheckError
from .io import ResultWriter, check_input, read_rows
from .model_info import model_info
from .plan import RowPrompt, Window, plan
from .readouts.base import Readout
from .schema import RowError


@dataclass(frozen=True)
class Summary:
    """Counts for one job. `questions` counts output records (one per row × question; classify: one per
    row). Tokens: logical = Σ branch lengths (what a no-reuse run computes); prefix_tokens = the prefix part
    of it (Σ over answered branches of their row's prefix length, so a row's prefix counts once per
    question); computed = Σ (branch − cached) + prefix warm-up passes; unique_tokens = what the planner
    counted for the answered branches of the chunks run now (a radix tree over each window holds)."""

    rows: int
    questions: int
    answered: int
    errors: int
    prefix_tokens: int
    branch_tokens: int
    cached_tokens: int
    warm_tokens: int
    wall_s: float
    output: str
    unique_tokens: int = 0
    model: str = ""  # model_info.describe(): architecture, hybrid/recurrent layers, MoE
    pattern: str = ""  # the request pattern the backend chose for it
    # the most frequent distinct errors: (count, error without its row name, one row it came from)
    top_errors: tuple[tuple[int, str, str], ...] = ()

    @property
    def computed_tokens(self) -> int:
        return self.branch_tokens - self.cached_tokens + self.warm_tokens

    @property
    def cache_hit_rate(self) -> float:
        """1 − computed/logical: the share of logical tokens the job did not have to compute."""
        return 1 - self.computed_tokens / self.branch_tokens if self.branch_tokens else 0.0

    @property
    def logical_tokens(self) -> int:
        return self.branch_tokens

    @property
    def shared_rate(self) -> float:
        """1 − unique/logical: the share of logical tokens the plan shares between rows."""
        return 1 - self.unique_tokens / self.branch_tokens if self.branch_tokens else 0.0


TOP_ERRORS = 5


def top_errors(stats: pa.Table, n: int = TOP_ERRORS) -> tuple[tuple[int, str, str], ...]:
    """The `n` most frequent distinct errors in an output's `id` and `error` columns, most frequent first
    (ties: first seen first). Every error starts with its row's name (`row T7: …`, or `row at index 4: …`
    for a row without a usable id); that name is taken off, so the same fault on many rows counts as one
    error. Numbers inside the rest (token counts) are kept: `branch has 40,210 tokens` and `… 41,003 …`
    are two errors, each with its exact text."""
    errs = stats.filter(pc.invert(pc.is_null(stats.column("error"))))
    counts: dict[str, list] = {}
    ids = errs.column("id").to_pylist() if "id" in errs.column_names else [None] * errs.num_rows
    for rid, e in zip(ids, errs.column("error").to_pylist(), strict=True):
        name = f"row {rid}: " if rid is not None else None
        if name is None or not e.startswith(name):
            m = re.match(r"row at index [0-9]+: ", e)
            name = m.group(0) if m else ""
        c = counts.setdefault(e[len(name) :], [0, name.removesuffix(": ")])
        c[0] += 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1][0])[:n]  # stable: ties keep first-seen order
    return tuple((c, msg, where) for msg, (c, where) in ranked)


# A backend that fails the same way on this many rows, each run alone, with no successful call between them
# (three different prefixes, so not one repeated conversation), is broken itself (an API mismatch, a missing
# kernel, a dead engine): the job ends (exit 4) instead of writing every row as an error. Three keeps the
# cost low (a window of R rows reaches its first single row after log2(R) calls) while two bad rows in a
# row stay row errors.
BROKEN_AFTER_ROWS = 3


def _signature(e: BaseException) -> str:
    """An exception's type and message with numbers masked: the same fault on different rows differs only
    in sizes and positions (`crop with a positive value (64)` vs `(71)`)."""
    return f"{type(e).__name__}: {re.sub(r'[0-9]+', '#', str(e))}"


class FailureTracker:
    """Tells a broken backend from bad rows across a job's windows (see BROKEN_AFTER_ROWS)."""

    def __init__(self, backend_name: str, partial: str | None = None):
        self.backend_name = backend_name
        self.resume_hint = f" (finished chunks are kept in {partial}: rerun with --resume)" if partial else ""
        # (prefix, signature, message) of the single-row failures since the last successful call; text
        # only: an exception's traceback holds the failed call's frames (and on a GPU their tensors)
        self.streak: list[tuple[tuple[int, ...], str, str]] = []

    def succeeded(self) -> None:
        self.streak.clear()

    def row_failed(self, prefix: tuple[int, ...], e: BaseException) -> None:
        sig = _signature(e)
        if self.streak and self.streak[-1][1] != sig:
            self.streak.clear()
        self.streak.append((prefix, sig, f"{type(e).__name__}: {str(e)[:500]}"))
        if len({p for p, _, _ in self.streak}) >= BROKEN_AFTER_ROWS:
            raise BackendError(
                f"the {self.backend_name} backend failed the same way on {len(self.streak)} rows in a row, "
                f"each run alone, with no call succeeding between them, so the backend itself is broken, "
                f"not the rows: {self.streak[0][2]}{self.resume_hint}"
            )


def make_readout(cfg: RunConfig, labels: tuple[str, ...] | None = None) -> Readout:
    """The readout of a job. classifier-head: `labels` from the backend, else read from the checkpoint's
    config.json (no weights; a checkpoint that is not a classifier is refused here, before any model loads).
    Raises ConfigError / BackendError."""
    if cfg.readout == "classifier-head":
        from .backends.checkpoint import read_checkpoint
        from .readouts.classifier_head import DEFAULT_TEMPLATE, ClassifierHead

        if labels is None:
            labels = read_checkpoint(cfg.model).labels
        return ClassifierHead(tuple(labels), cfg.template or DEFAULT_TEMPLATE, cfg.keep)
    from .readouts.label_logprobs import LabelLogprobs

    if not cfg.questions_file:
        return LabelLogprobs(None, cfg.keep)
    questions = load_questions(cfg.questions_file)  # raises ConfigError for a missing or bad file
    # the questions' content, not their path: an edited file must not mix old and new answers
    sha = hashlib.sha256(Path(cfg.questions_file).read_bytes()).hexdigest()
    return LabelLogprobs(questions, cfg.keep, sha)


def prefill_window(
    backend: Backend, window: Window, tracker: FailureTracker | None = None
) -> list[list[BranchResult]]:
    """`backend.prefill` with fault isolation: an engine error or out-of-memory on a window is retried on
    its two halves, down to single rows; a row that still fails gets the error on each of its branches.
    A dead engine (BackendError from `backend.check_alive()`) ends the job, and so does a backend that fails
    the same way on several rows alone with nothing succeeding between (`FailureTracker`)."""
    tracker = tracker or FailureTracker(backend.name)
    try:
        out = backend.prefill(window)
    except Exception as e:  # torch's OutOfMemoryError is a RuntimeError; API mismatches are any type
        backend.check_alive()
        if len(window.rows) == 1:
            r = window.rows[0]
            tracker.row_failed(r.prefix, e)
            msg = f"{type(e).__name__}: {e}"[:500]
            return [
                [
                    BranchResult((math.nan,) * len(b.label_ids), len(r.prefix) + len(b.suffix), 0, msg)
                    for b in r.branches
                ]
            ]
        return [res for half in window.halves() for res in prefill_window(backend, half, tracker)]
    tracker.succeeded()
    return out


@dataclass(frozen=True)
class Prompted:
    """A chunk after the prompt stage: its rows (parsed rows and RowErrors, input order), the prompts of
    the rows that have something to prefill, and per row position the questions that failed (qid → error)."""

    rows: list
    prompts: list[RowPrompt]
    failed: dict[int, dict[str, str]]


@dataclass(frozen=True)
class Scored:
    """A chunk after prefill and read-out: its output records (input order) and the planner's unique
    tokens of its answered branches."""

    records: list[dict[str, Any]]
    unique_tokens: int


def prompt_chunk(rows: list, prompter) -> Prompted:
    """Prompt stage of a chunk: render + tokenize every parsed row (`prompter.build_many`)."""
    good = [r for r in rows if not isinstance(r, RowError)]
    prompts, failed = [], {}
    for row, (rp, fails) in zip(good, prompter.build_many(good), strict=True):
        if rp is not None:
            prompts.append(rp)
        if fails:
            failed[row.pos] = {f.qid: f.error for f in fails}
    return Prompted(rows, prompts, failed)


def score_chunk(
    chunk: Prompted,
    readout: Readout,
    backend: Backend,
    budget: int,
    max_per_window: int,
    on_progress: Callable[[int, int], None] | None = None,
    tracker: FailureTracker | None = None,
) -> Scored:
    """Plan → prefill (with fault isolation) → read out, for one prompted chunk. `on_progress(branches,
    tokens)` after each window; `tracker` carries the broken-backend evidence across chunks (a fresh one
    per call if not given)."""
    tracker = tracker or FailureTracker(backend.name)
    results: dict[int, dict[str, tuple[int, BranchResult]]] = {}
    unique = 0
    for window in plan(chunk.prompts, budget, max_per_window):
        outs = prefill_window(backend, window, tracker)
        for rp, new, res in zip(window.rows, window.new_prefix_tokens, outs, strict=True):
            results[rp.pos] = {b.qid: (len(rp.prefix), r) for b, r in zip(rp.branches, res, strict=True)}
            ok = [len(b.suffix) for b, r in zip(rp.branches, res, strict=True) if r.error is None]
            unique += new + sum(ok) if ok else 0
        if on_progress:
            on_progress(window.n_branches, window.logical_tokens)
    records = []
    for row in chunk.rows:
        if isinstance(row, RowError):
            records.extend(readout.error_records(row))
        else:
            records.extend(readout.records(row, results.get(row.pos, {}), chunk.failed.get(row.pos, {})))
    return Scored(records, unique)


def job_manifest(cfg: RunConfig, readout: Readout | None = None) -> dict[str, Any]:
    """What identifies a job's partial output; `--resume` continues only a partial with the same manifest
    (single-machine and Ray runs write the same one, so either can resume the other). It holds everything
    that changes the numbers (model, backend, dtype, device, context length, engine settings) so one output
    never mixes precisions, and the readout's own key (the questions by content, or template and labels)."""
    readout = readout or make_readout(cfg)
    st = Path(cfg.input).stat()
    return {
        "input": str(Path(cfg.input).resolve()),
        "input_size": st.st_size,
        "input_mtime": st.st_mtime,
        "model": cfg.model,
        "backend": cfg.backend,
        **cfg.resume_key(),  # the engine options that change the numbers (config.ENGINE_OPTIONS)
        "chunk_rows": cfg.chunk_rows,
        "limit": cfg.limit,
        "keep": list(cfg.keep),
        **readout.manifest(),
    }


@dataclass
class Totals:
    """Running counts of a job's output, chunk by chunk (from each finished part, resumed ones too)."""

    rows: int = 0
    expected: int = 0
    records: int = 0
    errors: int = 0
    prefix: int = 0
    branch: int = 0
    cached: int = 0
    unique: int = 0
    failed: list = field(default_factory=list)  # the (id, error) rows of the parts, for top_errors

    def add(self, readout: Readout, part: pa.Table) -> None:
        bad = part.filter(pc.invert(pc.is_null(part.column("error"))))
        if bad.num_rows:
            self.failed.append(bad.select(["id", "error"]))
        self.records += part.num_rows
        self.errors += part.num_rows - int(pc.sum(pc.is_null(part.column("error"))).as_py() or 0)
        t = readout.tokens(part)
        self.prefix, self.branch, self.cached = (
            self.prefix + t["prefix"],
            self.branch + t["branch"],
            self.cached + t["cached"],
        )

    def check(self, output: Path, fix: str) -> None:
        """Raises OutputCheckError unless the output holds exactly the records the input needs."""
        if self.records != self.expected or not self.rows:
            raise OutputCheckError(
                f"count check failed: {self.rows} input rows need {self.expected} output rows, "
                f"the partial output has {self.records}; {fix}"
            )

    def summary(self, warm: int, wall_s: float, output: str, **extra: Any) -> Summary:
        return Summary(
            rows=self.rows, questions=self.records, answered=self.records - self.errors, errors=self.errors,
            prefix_tokens=self.prefix, branch_tokens=self.branch, cached_tokens=self.cached,
            warm_tokens=warm, wall_s=wall_s, output=output, unique_tokens=self.unique,
            top_errors=top_errors(pa.concat_tables(self.failed)) if self.failed else (), **extra,
        )  # fmt: skip


def run_job(
    cfg: RunConfig, backend: Backend | None = None, on_progress: Callable[[int, int], None] | None = None
) -> Summary:
    """Run one job end to end and return its Summary. `backend` may be passed in (tests, eval) and is then
    not closed here. `on_progress(branches_done, tokens_done)` is called after each window.
    With `cfg.resume`, chunks already in the partial output are not run again.

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, engine
    dead, output count check failed); the partial output is then kept for `--resume`.
    """
    t0 = time.perf_counter()
    if cfg.output is None:
        raise ConfigError("an output path (-o) is needed; only --dry-run runs without one")
    check_input(cfg.input, cfg.keep)
    own = backend is None
    readout = make_readout(cfg, None if own else backend.labels)
    if own:
        backend = load_backend(cfg.backend, cfg.backend_options(cfg.model), readout.backend_kind)
    warm0 = backend.warm_tokens
    try:
        # Branches longer than the model's context are refused in the prompt stage, before any model call.
        prompter = readout.prompter(backend.tokenizer, backend.context_length)
        budget = cfg.kv_budget_tokens or backend.kv_budget_tokens()
        store = ResultWriter(
            cfg.output, cfg.keep, job_manifest(cfg, readout), resume=cfg.resume, schema=readout.schema
        )
        tracker = FailureTracker(backend.name, partial=f"{cfg.output}.partial")
        totals = Totals()
        chunks = read_rows(
            cfg.input, keep=cfg.keep, chunk_rows=cfg.chunk_rows, limit=cfg.limit, readout=readout
        )

        def host(skip: bool):
            """Read the next chunk and, unless it is already done (--resume), render + tokenize it."""
            chunk = next(chunks, None)
            return None if chunk is None else (chunk, None if skip else prompt_chunk(chunk, prompter))

        # The host stage of chunk i+1 runs in a thread while chunk i is on the engine (the tokenizer's batch
        # calls release the GIL). Only that thread touches the reader and the prompter; each chunk is planned
        # and prefilled exactly as before, so the output is the same.
        pool = ThreadPoolExecutor(1, thread_name_prefix="openjev-host")
        try:
            pending = pool.submit(host, cfg.resume and store.done(0) is not None)
            i = 0
            while (item := pending.result()) is not None:
                chunk, prompted = item
                pending = pool.submit(host, cfg.resume and store.done(i + 1) is not None)
                totals.rows += len(chunk)
                totals.expected += sum(readout.n_records(r) for r in chunk)
                done = store.done(i) if prompted is None else None
                if done is None:
                    prompted = prompted or prompt_chunk(chunk, prompter)
                    scored = score_chunk(
                        prompted, readout, backend, budget, cfg.max_branches_per_window, on_progress, tracker
                    )
                    store.write(i, scored.records)
                    totals.unique += scored.unique_tokens
                    done = store.done(i)
                totals.add(readout, done)
                i += 1
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        totals.check(cfg.output, f"delete {Path(cfg.output).name}.partial and rerun")
        out = store.close()
    finally:
        if own:
            backend.close()
    return totals.summary(
        backend.warm_tokens - warm0,
        time.perf_counter() - t0,
        str(out),
        model=_describe(getattr(backend, "model_info", None) or model_info(cfg.model)),
        pattern=getattr(backend, "pattern", ""),
    )


def summarize(
    table: pa.Table,
    n_rows: int,
    warm_tokens: int,
    wall_s: float,
    output: str,
    model: str = "",
    pattern: str = "",
    readout: Readout | None = None,
) -> Summary:
    """A job's Summary from its whole output table (the Python API, which holds it in memory)."""
    if readout is None:
        from .readouts.label_logprobs import LabelLogprobs

        readout = LabelLogprobs()
    totals = Totals(rows=n_rows)
    totals.add(readout, table)
    return totals.summary(warm_tokens, wall_s, output, model=model, pattern=pattern)


@dataclass(frozen=True)
class PlanSummary:
    """What `--dry-run` reports: token counts of the planned job (no model). Tokens in tokens, RSS in MiB."""

    rows: int
    questions: int
    errors: int
    branches: int
    logical_tokens: int
    unique_tokens: int
    windows: int
    wall_s: float
    peak_rss_mb: float
    model: str = ""  # model_info.describe() from the checkpoint's config ('' when it cannot be read)
    sglang_pattern: str = ""  # the request pattern the sglang backend would choose for it
    backend: str = "sglang"
    unique_tokens_hf: int = 0

    @property
    def expected_hit_rate(self) -> float:
        """sglang: the radix cache shares any common token prefix (the planner's LCP count)."""
        return 1 - self.unique_tokens / self.logical_tokens if self.logical_tokens else 0.0

    @property
    def expected_hit_rate_hf(self) -> float:
        """hf: its KV cache is reused only by the next row with an identical prefix."""
        return 1 - self.unique_tokens_hf / self.logical_tokens if self.logical_tokens else 0.0


def dry_run(cfg: RunConfig, tokenizer=None) -> PlanSummary:
    """Read → prompt → plan the whole job with the model's tokenizer only, chunk by chunk (memory stays
    bounded by `chunk_rows`). Unique tokens are the planner's LCP count per window (see plan.py).
    Raises the same job-level errors as `run_job` for bad input or an unloadable tokenizer."""
    import resource

    from transformers import AutoTokenizer

    t0 = time.perf_counter()
    check_input(cfg.input, cfg.keep)
    readout = make_readout(cfg)
    if tokenizer is None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
        except Exception as e:
            raise BackendError(f"cannot load the tokenizer of {cfg.model!r}: {e}") from e
    prompter = readout.prompter(tokenizer)
    budget = cfg.kv_budget_tokens or 1 << 20
    rows = questions = errors = branches = logical = unique = unique_hf = windows = 0
    for chunk in read_rows(
        cfg.input, keep=cfg.keep, chunk_rows=cfg.chunk_rows, limit=cfg.limit, readout=readout
    ):
        rows += len(chunk)
        for r in chunk:
            n = readout.n_records(r)
            questions += n
            errors += n if isinstance(r, RowError) else 0
        prompted = prompt_chunk(chunk, prompter)
        errors += sum(len(f) for f in prompted.failed.values())
        for w in plan(prompted.prompts, budget, cfg.max_branches_per_window):
            windows += 1
            branches += w.n_branches
            logical += w.logical_tokens
            unique += w.unique_tokens
            # the hf backend keeps one prefix's cache: only an identical next prefix reuses it
            prev = None
            for r in w.rows:
                fresh = len(r.prefix) if r.prefix != prev else 0
                unique_hf += fresh + sum(len(b.suffix) for b in r.branches)
                prev = r.prefix
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB → MiB
    info = model_info(cfg.model)
    return PlanSummary(
        rows, questions, errors, branches, logical, unique, windows, time.perf_counter() - t0, rss,
        _describe(info), info.sglang_pattern() if info.known else "",
        backend=cfg.backend, unique_tokens_hf=unique_hf,
    )  # fmt: skip


def _describe(info) -> str:
    return info.describe() if info.known else ""
