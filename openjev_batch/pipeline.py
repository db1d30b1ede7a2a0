"""The job: read → prompt → plan → prefill → read out → write, chunk by chunk (bounded memory).

Output order is input order (row by row, questions in the row's order), whatever order the planner
ran the rows in. Every input row × question appears exactly once, answered or with its error.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .backends import Backend, BranchResult, load_backend
from .config import RunConfig, load_questions
from .errors import BackendError, ConfigError, OutputCheckError
from .io import ResultWriter, check_input, read_rows
from .model_info import model_info
from .plan import Window, plan
from .prompt import Prompter
from .readout import read_out
from .schema import MAX_BRANCH_TOKENS, QuestionSpec, Row, RowError


@dataclass(frozen=True)
class Summary:
    """Counts for one job. Tokens: logical = Σ branch lengths (what a no-reuse run computes);
    prefix_tokens = the prefix part of it (Σ over answered branches of their row's prefix length, so a
    row's prefix counts once per question); computed = Σ (branch − cached) + prefix warm-up passes."""

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


def _record(row_id: str, kept: dict, qid: str | None, qtype: str | None, **kw: Any) -> dict[str, Any]:
    rec = dict(
        id=row_id,
        question_id=qid,
        type=qtype,
        options=None,
        probs=None,
        answer=None,
        p_true=None,
        score=None,
        confidence=None,
        label_mass=None,
        prefix_tokens=None,
        branch_tokens=None,
        cached_tokens=None,
        error=None,
    )
    rec.update(kw)
    rec.update(kept)
    return rec


def _answer_record(row: Row, q: QuestionSpec, prefix_len: int, res: BranchResult) -> dict[str, Any]:
    tokens = dict(prefix_tokens=prefix_len, branch_tokens=res.prompt_tokens, cached_tokens=res.cached_tokens)
    if res.error:
        return _record(
            row.id,
            row.kept,
            q.qid,
            q.type,
            options=list(q.options),
            error=f"row {row.id}: questions.{q.qid}: {res.error}",
            **tokens,
        )
    try:
        a = read_out(q, res.logprobs)
    except ValueError as e:
        return _record(
            row.id,
            row.kept,
            q.qid,
            q.type,
            options=list(q.options),
            error=f"row {row.id}: questions.{q.qid}: {e}",
            **tokens,
        )
    return _record(
        row.id,
        row.kept,
        q.qid,
        q.type,
        options=list(a.options),
        probs=list(a.probs),
        answer=a.answer,
        p_true=a.p_true,
        score=a.score,
        confidence=a.confidence,
        label_mass=a.label_mass,
        **tokens,
    )


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


def _prompt_chunk(chunk, prompter: Prompter) -> tuple[list, dict]:
    """The host stage of one chunk: render + tokenize → (RowPrompts, {(pos, qid): error} of failed questions)."""
    prompts, failed = [], {}
    rows = [r for r in chunk if isinstance(r, Row)]
    for row, (rp, fails) in zip(rows, prompter.build_many(rows), strict=True):
        if rp is not None:
            prompts.append(rp)
        failed.update({(row.pos, f.qid): f.error for f in fails})
    return prompts, failed


def _chunk_records(
    chunk,
    prompted: tuple[list, dict],
    backend: Backend,
    cfg: RunConfig,
    budget: int,
    on_progress: Callable[[int, int], None] | None,
    tracker: FailureTracker | None = None,
) -> list[dict[str, Any]]:
    """One input chunk and its host stage (`_prompt_chunk`) → its output records, in input order (rows, then
    each row's questions). `tracker` carries the broken-backend evidence across chunks (a fresh one per
    call if not given)."""
    tracker = tracker or FailureTracker(backend.name)
    prompts, failed = prompted
    results: dict[tuple[int, str], tuple[int, BranchResult]] = {}
    for window in plan(prompts, budget, cfg.max_branches_per_window):
        for rp, outs in zip(window.rows, prefill_window(backend, window, tracker), strict=True):
            for b, res in zip(rp.branches, outs, strict=True):
                results[(rp.pos, b.qid)] = (len(rp.prefix), res)
        if on_progress:
            on_progress(window.n_branches, window.logical_tokens)
    records = []
    for row in chunk:
        if isinstance(row, RowError):
            records.extend(
                _record(row.id, row.kept, qid, row.type_of(i), error=row.error)
                for i, qid in enumerate(row.qids or (None,))
            )
            continue
        for q in row.questions:
            key = (row.pos, q.qid)
            if key in failed:
                opts = list(q.options) if isinstance(q, QuestionSpec) else None
                records.append(_record(row.id, row.kept, q.qid, q.type, error=failed[key], options=opts))
            else:
                plen, res = results[key]
                records.append(_answer_record(row, q, plen, res))
    return records


def job_manifest(cfg: RunConfig) -> dict[str, Any]:
    """What identifies a job's partial output; `--resume` continues only a partial with the same manifest
    (single-machine and Ray runs write the same one, so either can resume the other). It holds everything
    that changes the numbers (model, backend, dtype, device, context length, engine settings) so one output
    never mixes precisions; the questions are identified by content, so the same file by another path (or a
    byte-identical copy) resumes."""
    st = Path(cfg.input).stat()
    return {
        "input": str(Path(cfg.input).resolve()),
        "input_size": st.st_size,
        "input_mtime": st.st_mtime,
        "model": cfg.model,
        "backend": cfg.backend,
        "dtype": cfg.dtype,
        "device": cfg.device,
        "tp_size": cfg.tp_size,  # tensor parallelism changes the bf16 reduction order
        "context_length": cfg.context_length,
        "attention_backend": cfg.attention_backend,
        "engine_args": {k: repr(v) for k, v in sorted(cfg.engine_args.items())},
        "chunk_rows": cfg.chunk_rows,
        "limit": cfg.limit,
        "keep": list(cfg.keep),
        # the questions' content, not their path: an edited file must not mix old and new answers
        "questions_sha256": hashlib.sha256(Path(cfg.questions_file).read_bytes()).hexdigest()
        if cfg.questions_file
        else None,
    }


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
    shared = load_questions(cfg.questions_file) if cfg.questions_file else None
    own = backend is None
    if own:
        backend = load_backend(cfg.backend, cfg.backend_options(cfg.model))
    warm0 = backend.warm_tokens
    try:
        # Branches longer than the model's context are refused in the prompt stage, before any model call.
        ctx = getattr(backend, "context_length", None)
        prompter = Prompter(
            backend.tokenizer, max_branch_tokens=min(MAX_BRANCH_TOKENS, ctx or MAX_BRANCH_TOKENS)
        )
        budget = cfg.kv_budget_tokens or backend.kv_budget_tokens()
        writer = ResultWriter(cfg.output, cfg.keep, job_manifest(cfg), resume=cfg.resume)
        tracker = FailureTracker(backend.name, partial=f"{cfg.output}.partial")
        n_rows = expected = 0
        tables = []
        chunks = read_rows(cfg.input, shared, cfg.keep, cfg.chunk_rows, cfg.limit)

        def host(skip: bool):
            """Read the next chunk and, unless it is already done (--resume), render + tokenize it."""
            chunk = next(chunks, None)
            return None if chunk is None else (chunk, None if skip else _prompt_chunk(chunk, prompter))

        # The host stage of chunk i+1 runs in a thread while chunk i is on the engine (the tokenizer's batch
        # calls release the GIL). Only that thread touches the reader and the prompter; each chunk is planned
        # and prefilled exactly as before, so the output is the same.
        pool = ThreadPoolExecutor(1, thread_name_prefix="openjev-host")
        try:
            pending = pool.submit(host, cfg.resume and writer.done(0) is not None)
            i = 0
            while (item := pending.result()) is not None:
                chunk, prompted = item
                pending = pool.submit(host, cfg.resume and writer.done(i + 1) is not None)
                n_rows += len(chunk)
                expected += sum(
                    max(1, len(r.qids if isinstance(r, RowError) else r.questions)) for r in chunk
                )
                done = writer.done(i) if prompted is None else None
                if done is None:
                    prompted = prompted or _prompt_chunk(chunk, prompter)
                    writer.write(
                        i, _chunk_records(chunk, prompted, backend, cfg, budget, on_progress, tracker)
                    )
                    done = writer.done(i)
                tables.append(done.select(["id", "error", "prefix_tokens", "branch_tokens", "cached_tokens"]))
                i += 1
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        stats = pa.concat_tables(tables) if tables else None
        if stats is None or stats.num_rows != expected:
            got = 0 if stats is None else stats.num_rows
            raise OutputCheckError(
                f"count check failed: {n_rows} input rows need {expected} output rows, "
                f"the partial output has {got}; delete {Path(cfg.output).name}.partial and rerun"
            )
        out = writer.close()
    finally:
        if own:
            backend.close()
    return summarize(
        stats,
        n_rows,
        backend.warm_tokens - warm0,
        time.perf_counter() - t0,
        str(out),
        _describe(getattr(backend, "model_info", None) or model_info(cfg.model)),
        getattr(backend, "pattern", ""),
    )


def summarize(
    stats: pa.Table,
    n_rows: int,
    warm_tokens: int,
    wall_s: float,
    output: str,
    model: str = "",
    pattern: str = "",
) -> Summary:
    """A job's Summary from its output's error and token columns (the CLI's run and the Python API)."""
    ok = pc.is_null(stats.column("error"))
    answered = stats.filter(ok)
    return Summary(
        rows=n_rows,
        questions=stats.num_rows,
        answered=answered.num_rows,
        errors=stats.num_rows - answered.num_rows,
        prefix_tokens=int(pc.sum(answered.column("prefix_tokens")).as_py() or 0),
        branch_tokens=int(pc.sum(answered.column("branch_tokens")).as_py() or 0),
        cached_tokens=int(pc.sum(answered.column("cached_tokens")).as_py() or 0),
        warm_tokens=warm_tokens,
        wall_s=wall_s,
        output=output,
        model=model,
        pattern=pattern,
        top_errors=top_errors(stats),
    )


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

    from .errors import BackendError as _BE

    t0 = time.perf_counter()
    check_input(cfg.input, cfg.keep)
    shared = load_questions(cfg.questions_file) if cfg.questions_file else None
    if tokenizer is None:
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
        except Exception as e:
            raise _BE(f"cannot load the tokenizer of {cfg.model!r}: {e}") from e
    prompter = Prompter(tokenizer)
    budget = cfg.kv_budget_tokens or 1 << 20
    rows = questions = errors = branches = logical = unique = unique_hf = windows = 0
    for chunk in read_rows(cfg.input, shared, cfg.keep, cfg.chunk_rows, cfg.limit):
        rows += len(chunk)
        good = [r for r in chunk if isinstance(r, Row)]
        for r in chunk:
            n = max(1, len(r.qids)) if isinstance(r, RowError) else len(r.questions)
            questions += n
            errors += n if isinstance(r, RowError) else 0
        prompts = []
        for rp, fails in prompter.build_many(good):
            errors += len(fails)
            if rp is not None:
                prompts.append(rp)
        for w in plan(prompts, budget, cfg.max_branches_per_window):
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
        rows,
        questions,
        errors,
        branches,
        logical,
        unique,
        windows,
        time.perf_counter() - t0,
        rss,
        _describe(info),
        info.sglang_pattern() if info.known else "",
        backend=cfg.backend,
        unique_tokens_hf=unique_hf,
    )


def _describe(info) -> str:
    return info.describe() if info.known else ""
