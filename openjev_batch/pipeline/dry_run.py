"""`--dry-run`: the whole job read → prompted → planned with the tokenizer only (token counts and the expected
cache hit rate, no model); `--show-prompt N`: the first rows' rendered branches, tokenizer only too. Both are
the one loop (loop.py) over the input file (`FileSource`), the plan-only runner (runners/plan_only.py) and
no output (`NullSink`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends import BackendPlan
from ..config import RunConfig
from ..readouts.base import Readout
from . import loop
from .input.source import FileSource
from .job_images import choose_images
from .output.sink import NullSink
from .runners.plan_only import PlanOnlyRunner


@dataclass(frozen=True)
class PlanSummary:
    """What `--dry-run` reports: token counts of the planned job (no model). Tokens in tokens, RSS in MiB.
    `by_backend`: what each backend would compute and the request pattern it would use (backends.BackendPlan,
    counted by its spec), the run's backend (`backend`) first."""

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
    backend: str = ""
    by_backend: dict[str, BackendPlan] = field(default_factory=dict)
    images: int = 0
    image_tokens: int = 0  # part of the logical tokens (in the prefixes)
    layout: str = ""  # the label readout's --layout ('' for another readout)

    @property
    def expected_hit_rate(self) -> float:
        """The planner's count: a cache that shares any common token prefix."""
        return 1 - self.unique_tokens / self.logical_tokens if self.logical_tokens else 0.0

    def hit_rate(self, backend: str) -> float:
        """The cache hit rate `backend` would have (its spec's count of what it computes)."""
        return self.by_backend[backend].hit_rate(self.logical_tokens)


def dry_run(cfg: RunConfig, tokenizer=None, readout: Readout | None = None) -> PlanSummary:
    """Read → prompt → plan the whole job with the model's tokenizer only, chunk by chunk (memory stays
    bounded by `chunk_rows`). Unique tokens are the planner's LCP count per window (see plan.py). `readout`:
    the job's, built once by the caller (else the loop builds it).
    Raises the same job-level errors as `run_job` for bad input or an unloadable tokenizer."""
    import resource

    cfg, _ = choose_images(cfg)  # the pattern an engine for this input would run: none multi-item with images
    s, _ = loop.run(cfg, FileSource(cfg), NullSink(), PlanOnlyRunner(tokenizer), readout=readout)
    p = s.counted
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB → MiB
    return PlanSummary(
        s.rows, s.questions, s.errors, p.branches, p.logical_tokens, p.unique_tokens, p.windows, s.wall_s,
        rss, s.model, backend=cfg.backend, by_backend=p.by_backend, images=p.images, image_tokens=p.image_tokens,
        # the layout and its tokenization scheme's name; the cut's words after it wrapped every row of the
        # table on an 80-column terminal (the eval report keeps them)
        layout=f"{lay} ({p.tokenization.partition(' (')[0]})" if (lay := getattr(cfg.readout_options, "layout", "")) else "",
    )  # fmt: skip


def show_prompt(cfg: RunConfig, n: int, tokenizer=None) -> str:
    """What the model gets for the first `n` input rows (`run --show-prompt`): the ids a job would send,
    decoded, with the prefix/suffix cut, the control tokens and the label tokens marked
    (the readout's `show`). Tokenizer only, no weights. Raises the job-level errors of `run` for bad input,
    questions or tokenizer, ConfigError for a readout without a prompt display."""
    first = cfg.model_copy(update={"limit": min(n, cfg.limit or n), "chunk_rows": max(n, 1)})
    s, _ = loop.run(first, FileSource(first), NullSink(), PlanOnlyRunner(tokenizer, show=True))
    return "".join(s.counted.shown)
