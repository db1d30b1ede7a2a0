"""`--dry-run`: the whole job read → prompted → planned with the tokenizer only (token counts and the expected
cache hit rate, no model); `--show-prompt N`: the first rows' rendered branches, tokenizer only too. Both are
the one loop (loop.py) over the input file (`FileSource`), the plan-only runner (runners/plan_only.py) and
no output (`NullSink`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import RunConfig
from . import loop
from .input.source import FileSource
from .job_images import choose_images
from .output.sink import NullSink
from .runners.plan_only import PlanOnlyRunner


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
    images: int = 0
    image_tokens: int = 0  # part of the logical tokens (in the prefixes)
    multi_item_tokens: int = 0  # what multi-item scoring computes (each pack's prefix again, no radix cache)

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

    cfg, _ = choose_images(cfg)  # the pattern an engine for this input would run: none multi-item with images
    s, _ = loop.run(cfg, FileSource(cfg), NullSink(), PlanOnlyRunner(tokenizer))
    p = s.counted
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB → MiB
    return PlanSummary(
        s.rows, s.questions, s.errors, p.branches, p.logical_tokens, p.unique_tokens, p.windows, s.wall_s,
        rss, s.model, s.pattern, backend=cfg.backend, unique_tokens_hf=p.unique_tokens_hf,
        images=p.images, image_tokens=p.image_tokens, multi_item_tokens=p.multi_item_tokens,
    )  # fmt: skip


def show_prompt(cfg: RunConfig, n: int, tokenizer=None) -> str:
    """What the model gets for the first `n` input rows (`run --show-prompt`): the ids a job would send,
    decoded, with the prefix/suffix cut, the control tokens and the label tokens marked
    (the readout's `show`). Tokenizer only, no weights. Raises the job-level errors of `run` for bad input,
    questions or tokenizer, ConfigError for a readout without a prompt display."""
    first = cfg.model_copy(update={"limit": min(n, cfg.limit or n), "chunk_rows": max(n, 1)})
    s, _ = loop.run(first, FileSource(first), NullSink(), PlanOnlyRunner(tokenizer, show=True))
    return "".join(s.counted.shown)
