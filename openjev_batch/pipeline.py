"""The job: read → prompt → plan → prefill → read out → write, chunk by chunk (bounded memory).

Output order is input order (row by row, questions in the row's order), whatever order the planner
ran the rows in. Every input row × question appears exactly once, answered or with its error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backends import Backend, BackendOptions, BranchResult, load_backend
from .config import RunConfig, load_questions
from .io import ResultWriter, check_input, read_rows
from .plan import plan
from .prompt import Prompter
from .readout import read_out
from .schema import QuestionSpec, Row, RowError


@dataclass(frozen=True)
class Summary:
    """Counts for one job. Tokens: logical = Σ branch lengths (what a no-reuse run computes);
    computed = Σ (branch − cached) + prefix warm-up passes (as reported by the backend)."""

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

    @property
    def computed_tokens(self) -> int:
        return self.branch_tokens - self.cached_tokens + self.warm_tokens

    @property
    def cache_hit_rate(self) -> float:
        """1 − computed/logical: the share of logical tokens the job did not have to compute."""
        return 1 - self.computed_tokens / self.branch_tokens if self.branch_tokens else 0.0


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


def run_job(
    cfg: RunConfig, backend: Backend | None = None, on_progress: Callable[[int, int], None] | None = None
) -> Summary:
    """Run one job end to end and return its Summary. `backend` may be passed in (tests, eval) and is then
    not closed here. `on_progress(branches_done, tokens_done)` is called after each window.

    Raises OpenjevError subclasses for job-level failures (input unreadable, model not loadable, ...).
    """
    t0 = time.perf_counter()
    warm0 = backend.warm_tokens if backend is not None else 0
    check_input(cfg.input, cfg.keep)
    shared = load_questions(cfg.questions_file) if cfg.questions_file else None
    own = backend is None
    if own:
        backend = load_backend(
            cfg.backend,
            BackendOptions(
                model=cfg.model,
                device=cfg.device,
                dtype=cfg.dtype,
                tp_size=cfg.tp_size,
                dp_size=cfg.dp_size,
                mem_fraction_static=cfg.mem_fraction_static,
                attention_backend=cfg.attention_backend,
                context_length=cfg.context_length,
                engine_args=dict(cfg.engine_args),
            ),
        )
    try:
        prompter = Prompter(backend.tokenizer)
        budget = cfg.kv_budget_tokens or backend.kv_budget_tokens()
        writer = ResultWriter(cfg.output, cfg.keep)
        n_rows = n_q = n_ok = n_err = pre_tok = br_tok = cached = 0
        for chunk in read_rows(cfg.input, shared, cfg.keep, cfg.chunk_rows):
            prompts, failed = [], {}
            rows = [r for r in chunk if isinstance(r, Row)]
            for row, (rp, fails) in zip(rows, prompter.build_many(rows), strict=True):
                if rp is not None:
                    prompts.append(rp)
                failed.update({(row.pos, f.qid): f.error for f in fails})
            results: dict[tuple[int, str], tuple[int, BranchResult]] = {}
            for window in plan(prompts, budget, cfg.max_branches_per_window):
                for rp, outs in zip(window.rows, backend.prefill(window), strict=True):
                    for b, res in zip(rp.branches, outs, strict=True):
                        results[(rp.pos, b.qid)] = (len(rp.prefix), res)
                if on_progress:
                    on_progress(window.n_branches, window.logical_tokens)
            records = []
            for row in chunk:
                n_rows += 1
                if isinstance(row, RowError):
                    for qid in row.qids or (None,):
                        records.append(_record(row.id, row.kept, qid, None, error=row.error))
                    continue
                for q in row.questions:
                    key = (row.pos, q.qid)
                    if key in failed:
                        records.append(
                            _record(
                                row.id,
                                row.kept,
                                q.qid,
                                q.type,
                                error=failed[key],
                                options=list(q.options) if isinstance(q, QuestionSpec) else None,
                            )
                        )
                    else:
                        plen, res = results[key]
                        records.append(_answer_record(row, q, plen, res))
                        pre_tok += plen
                        br_tok += res.prompt_tokens
                        cached += res.cached_tokens
            for r in records:
                n_q += 1
                if r["error"]:
                    n_err += 1
                else:
                    n_ok += 1
            writer.write(records)
        out = writer.close()
    finally:
        if own:
            backend.close()
    return Summary(
        n_rows,
        n_q,
        n_ok,
        n_err,
        pre_tok,
        br_tok,
        cached,
        backend.warm_tokens - warm0,
        time.perf_counter() - t0,
        str(out),
    )
