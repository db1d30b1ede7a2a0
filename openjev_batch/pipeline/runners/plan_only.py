"""The plan-only runner: the model's tokenizer alone, no weights. Each chunk the loop gives it is prompted and
planned as a job would plan it (`--dry-run`: token counts and the expected cache hit rate), or rendered as
the model would get it (`--show-prompt`). Its records only stand for the job's output (the null sink counts
them), so the loop's count check and totals cover a dry run as they cover a job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends import SPECS
from ...backends.base import BackendPlan, load_tokenizer
from ...checkpoint.info import model_info
from ...readouts.base import Readout
from ..plan import plan
from ..stages import prompt_chunk
from ..summary import Summary, describe_model
from . import stand_ins

if TYPE_CHECKING:
    from ...config import RunConfig


@dataclass
class PlanCounts:
    """What the planner counted over a job (tokens in tokens): windows, branches, logical tokens (Σ branch
    lengths), unique tokens (the planner's LCP count per window: a cache that shares any common token prefix),
    and per backend what it would compute (`by_backend`: each spec counts its own cache, the run's backend
    first). `shown`: with `show`, each chunk's rendered rows."""

    windows: int = 0
    branches: int = 0
    logical_tokens: int = 0
    unique_tokens: int = 0
    images: int = 0  # images in the rows' prefixes (each row's once)
    image_tokens: int = 0  # their tokens (counted in the prefix tokens too)
    by_backend: dict[str, BackendPlan] = field(default_factory=dict)
    shown: list[str] = field(default_factory=list)
    # with `texts`: {(row id, question id): the ids a job sends, decoded with their control tokens}
    texts: dict[tuple[str, str], str] = field(default_factory=dict)
    tokenization: str = ""  # the prompter's tokenization by name (label readout; eval's report)

    def add(self, windows, image_id: int | None = None) -> None:
        windows = list(windows)
        for name, counts in self.by_backend.items():
            SPECS[name].count(counts, windows)
        for w in windows:
            self.windows += 1
            self.branches += w.n_branches
            self.logical_tokens += w.logical_tokens
            self.unique_tokens += w.unique_tokens
            for r in w.rows:
                if r.images:
                    self.images += len(r.images)
                    self.image_tokens += sum(1 for i in r.prefix if i == image_id)


class PlanOnlyRunner:
    """`tokenizer`: one already loaded (a held backend's, tests), else the model's is loaded when the job opens;
    `prompter`: one already built for it (the Python API's, its labels verified once). `show`: also render
    each chunk's rows (the readout's `show`) into `PlanCounts.shown`; `texts`: also decode each branch's ids
    into `PlanCounts.texts` (eval's per-sample prompts)."""

    name = "plan-only"
    summary_type = Summary
    labels = None  # a classifier's labels come from its config.json (the registry reads them)

    def __init__(self, tokenizer: Any = None, show: bool = False, texts: bool = False, prompter: Any = None):
        self.tokenizer, self.show, self.texts, self.held_prompter = tokenizer, show, texts, prompter

    @contextlib.contextmanager
    def open(self, cfg: RunConfig, readout: Readout):
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(cfg.model, cfg.trust_remote_code)
        self.cfg, self.readout = cfg, readout
        # the branch limit a job would have: the backends take max_position_embeddings (or --context-length);
        # without it a dry run passed an 8,192-token model's 10k-token rows that the job then refused
        self.info = model_info(cfg.model)  # config.json, read once: the limit here, describe() below
        self.prompter = self.held_prompter or readout.prompter(
            self.tokenizer, cfg.context_length or self.info.context_length
        )
        # no engine to ask: a budget no chunk reaches, so windows are cut by max_branches alone
        self.budget = cfg.kv_budget_tokens or 1 << 20
        names = [cfg.backend, *(n for n in SPECS if n != cfg.backend)]  # the run's backend first
        self.counts = PlanCounts(by_backend={n: BackendPlan(SPECS[n].cache) for n in names})
        for n, counts in self.counts.by_backend.items():  # what each backend would choose for it, in words
            counts.pattern = SPECS[n].planned(cfg, self.info)
        # Variants (order-debiased questions) wraps the base Prompter; a classifier-head prompter has none
        self.counts.tokenization = getattr(getattr(self.prompter, "base", self.prompter), "tokenization", "")
        yield self

    def describe(self) -> dict[str, Any]:
        """The model's kind and the request pattern the run's backend would choose for it, from its
        config.json (both '' when it cannot be read), and the plan's counts."""
        return {
            "model": describe_model(self.info),
            "pattern": self.counts.by_backend[self.cfg.backend].pattern,
            "counted": self.counts,
        }

    def score(self, todo: Iterator[tuple[int, list]], tracker=None, progress=None, on_progress=None):
        """Prompt and plan each chunk of `todo` (memory stays one chunk's); yields (index, the chunk's
        stand-in records, {}) — nothing is prefilled, so there are no warm-up or scored tokens to report."""
        for i, chunk in todo:
            prompted = prompt_chunk(chunk, self.prompter)
            images = any(r.images for r in prompted.prompts)  # the label readout's prompter knows their token
            image_id = getattr(self.prompter, "image_id", None) if images else None
            self.counts.add(plan(prompted.prompts, self.budget, self.cfg.max_branches), image_id)
            if self.show:
                self.counts.shown.append(self.readout.show(chunk, self.prompter))
            if self.texts:
                for rp in prompted.prompts:
                    for b in rp.branches:  # what the model reads, markup included
                        self.counts.texts[(rp.row_id, b.qid)] = self.tokenizer.decode([*rp.prefix, *b.suffix])
            failed = {pos: list(f.values()) for pos, f in prompted.failed.items()}
            yield i, stand_ins(self.readout, chunk, failed), {}
