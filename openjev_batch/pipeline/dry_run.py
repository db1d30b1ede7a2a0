"""`--dry-run`: read → prompt → plan the whole job with the tokenizer only; token counts and the expected cache
hit rate, no model. `--show-prompt N`: the first rows' rendered branches, tokenizer only too."""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import readouts
from ..backends.base import load_tokenizer
from ..backends.sglang.patterns import planned as planned_pattern
from ..config import RunConfig
from ..core import RowError
from ..errors import ConfigError
from ..model_info import model_info
from .plan import plan
from .read import check_input, job_rows
from .stages import prompt_chunk
from .summary import describe_model


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

    t0 = time.perf_counter()
    check_input(cfg.input, cfg.keep)
    readout = readouts.build(cfg.readout, cfg)
    if tokenizer is None:
        tokenizer = load_tokenizer(cfg.model, cfg.trust_remote_code)
    prompter = readout.prompter(tokenizer)
    budget = cfg.kv_budget_tokens or 1 << 20
    rows = questions = errors = branches = logical = unique = unique_hf = windows = 0
    for chunk in job_rows(cfg, readout)[0]:
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
        describe_model(info), planned_pattern(cfg, info) if info.known else "",
        backend=cfg.backend, unique_tokens_hf=unique_hf,
    )  # fmt: skip


def show_prompt(cfg: RunConfig, n: int, tokenizer=None) -> str:
    """What the model gets for the first `n` input rows (`run --show-prompt`): the ids a job would send,
    decoded, with the prefix/suffix cut, the control tokens and the label tokens marked
    (readouts/label_logprobs/show.py). Tokenizer only, no weights. Raises the job-level errors of `run` for
    bad input, questions or tokenizer."""
    from ..readouts.label_logprobs.show import render_rows

    if cfg.readout != "label-logprobs":
        raise ConfigError("--show-prompt is for run (label logprobs)")
    check_input(cfg.input, cfg.keep)
    readout = readouts.build(cfg.readout, cfg)
    if tokenizer is None:
        tokenizer = load_tokenizer(cfg.model, cfg.trust_remote_code)
    prompter = readout.prompter(tokenizer)
    first = cfg.model_copy(update={"limit": min(n, cfg.limit or n), "chunk_rows": max(n, 1)})
    rows = [r for chunk in job_rows(first, readout)[0] for r in chunk]
    return render_rows(rows, prompter)
