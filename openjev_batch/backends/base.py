"""The backend interface: one prefill contract for every readout (a window of rows that share prefixes in,
one BranchResult per branch out). `kind` says which readout a backend class serves:
`label-logprobs` (causal LMs: label logprobs of each branch) or `classifier-head` (sequence classifiers:
one branch per row, its raw logits, aligned with `labels`).

Contract (every backend):
- `tokenizer` is the model's Hugging Face tokenizer; the prompt stage tokenizes with it.
- `kv_budget_tokens()` is how many tokens a window may hold (the planner's budget).
- `prefill(window)` runs one forward pass per branch (prefix ids + suffix ids) and returns, for
  `window.rows[i].branches[j]`, `result[i][j]`: label-logprobs, the natural-log probabilities
  (full-vocabulary log-softmax at the last position) of that branch's `label_ids`, in the same order,
  read by token id; classifier-head, the class logits of the row's one branch. A branch that cannot run
  (too long, a missing or non-finite logprob) gets its `error` set; it never raises for one branch.
  No token is decoded. The prefix is computed once per distinct prefix and reused (KV / radix cache).
- A branch's `cached_tokens` are the tokens of its prompt not computed for it because an earlier pass
  computed them: hf's prefix pass runs for a prefix's first answered branch, which reports 0 (issue 34.8).
  `warm_tokens` counts the prefix tokens computed by warm-up passes (not part of any branch: sglang's
  prefix-only requests), so that computed tokens = Σ (branch prompt − cached) + warm_tokens.
- `report(done)` (optional, for live progress) says which branches just finished inside a window, as
  (RowPrompt, branch index, BranchResult) triples; hf reports per row, sglang per request batch. A backend
  that does not report is counted when its window ends.
- `configure(opts)` applies the request options of `options.ENGINE_OPTIONS` that a started backend can
  change (sglang: `request_pattern`, `groups_per_window`, `pipeline_depth`, `skip_prefix_warmup`):
  `load_backend` calls it at start-up and `run_job` again for a backend passed in. Read-only fact:
  `pattern` (how it sends its work, in words); a backend's own facts are its own (sglang: `request_pattern`,
  `kv_capacity_tokens`), and what the pipeline asks before a start is its spec's (`BackendSpec` below).
- `close()` frees the model/engine; backends are context managers.
Raises BackendError when the model cannot load or the engine dies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..checkpoint.trust import trust_hint
from ..core import BranchResult, Window
from ..errors import BackendError
from ..options import BackendOptions

if TYPE_CHECKING:
    from ..checkpoint.info import ModelInfo
    from ..config import RunConfig


def load_tokenizer(model: str, trust_remote_code: bool = False) -> Any:
    """The model's Hugging Face tokenizer, for the stages that tokenize without a backend (`--dry-run`, the
    Ray render actors and driver), with the checkpoint-trust option the backends use, held to its
    tokenizer.json (tokenizer.faithful). Raises BackendError naming the option that would allow a refused
    checkpoint."""
    from transformers import AutoTokenizer

    from .tokenizer import faithful  # lazy: keeps --help fast (`python -m` loads backends/)

    try:
        tok = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        return faithful(tok, model, trust_remote_code=trust_remote_code)
    except BackendError:
        raise
    except Exception as e:
        # validated from a mapping: mypy sees no generated option among the keywords of the constructor
        opts = BackendOptions.model_validate({"model": model, "trust_remote_code": trust_remote_code})
        hint = trust_hint(opts, e)
        raise BackendError(f"cannot load the tokenizer of {model!r}: {e}{hint}") from e


class Backend(ABC):
    """`labels`: classifier-head backends, the checkpoint's label names (the order of their logits);
    `context_length`: the longest branch the model takes (None: unknown)."""

    name: str = "?"
    kind: str = "label-logprobs"
    tokenizer: Any
    warm_tokens: int = 0
    scoring: str = "branches"  # the prefill path: one pass per branch; sglang may say "multi-item"
    labels: tuple[str, ...] | None = None
    context_length: int | None = None
    # Set by the job while a window runs (pipeline/progress.WindowReports), so progress moves within a long
    # window instead of once at its end; None otherwise.
    on_branches: Callable[[list], None] | None = None

    def report(self, done: list) -> None:
        """Tell the job that these (RowPrompt, branch index, BranchResult) are finished (a no-op unless it
        listens). Called by the backend from the thread that runs `prefill`."""
        if self.on_branches is not None and done:
            self.on_branches(done)

    pattern: str = ""  # how prefill sends its work, in words (the run summary shows it)

    @abstractmethod
    def kv_budget_tokens(self) -> int: ...

    @abstractmethod
    def prefill(self, window: Window) -> list[list[BranchResult]]: ...

    def too_long(self, n: int) -> str | None:
        """The error of a branch of `n` tokens that the model cannot take, else None."""
        if self.context_length and n > self.context_length:
            return f"prompt has {n} tokens, the model takes at most {self.context_length}"
        return None

    def one_branch_rows(self, window: Window) -> tuple[list, list[tuple[int, tuple[int, ...]]]]:
        """For a classifier-head window (one branch per row): the results list with the too-long rows'
        errors filled in, and the (index, prompt ids) of the rows to run."""
        results: list[list[BranchResult] | None] = [None] * len(window.rows)
        todo = []
        for i, rp in enumerate(window.rows):
            ids = rp.prefix + rp.branches[0].suffix
            if err := self.too_long(len(ids)):
                results[i] = [BranchResult((), len(ids), 0, err)]
            else:
                todo.append((i, ids))
        return results, todo

    def configure(self, opts: Any) -> None:  # noqa: B027 - optional hook
        """Apply `opts`' request options (an EngineOptions); raises ConfigError for ones this backend's
        engine cannot serve. Backends without request options have nothing to do (another backend's options
        are refused when the config is built, and by each backend's `__init__`: `opts.check_backend`)."""

    def check_alive(self) -> None:  # noqa: B027 - optional hook
        """Raise BackendError when the engine is dead (called after a failed window)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@dataclass
class BackendPlan:
    """What one backend would do with a planned job (`--dry-run`, no engine): the tokens it would compute
    (`unique_tokens`; its cache shares the rest, `cache` says how, in words), more counts by their words
    (shown when it is the run's backend), and the request pattern it would use ('' when it has none)."""

    cache: str
    unique_tokens: int = 0
    more: dict[str, int] = field(default_factory=dict)
    pattern: str = ""

    def hit_rate(self, logical_tokens: int) -> float:
        return 1 - self.unique_tokens / logical_tokens if logical_tokens else 0.0


class BackendSpec:
    """A backend's facts, asked by the pipeline, the dry run, Ray, eval and the display, which never name a
    backend: light (no engine, no heavy import at module level; backends/<name>/spec.py), registered in
    `backends.SPECS`. `kinds`: readout kind → "module:Class" of the `Backend` that serves it; `cache`: how its
    cache shares tokens, in words; `images_at_start`: whether its engine is told when it starts if the job's
    input has image rows (`BackendOptions.images`, read first by pipeline/job_images.choose_images);
    `serve_batch_ms`: serve's batch time budget by default."""

    name: str = "?"
    kinds: dict[str, str] = {}
    cache: str = ""
    images_at_start: bool = False
    # serve's batch time budget when --batch-ms is 0 (serve/batching.BatchBudget): how long one batch may run
    serve_batch_ms: float = 1000.0

    def count(self, plan: BackendPlan, windows: Iterable[Any]) -> None:
        """Add to `plan` the tokens this backend would compute for planned `windows` (pipeline/plan.Window):
        by default the planner's own count (a cache that shares any common token prefix)."""
        plan.unique_tokens += sum(w.unique_tokens for w in windows)

    def planned(self, cfg: RunConfig, info: ModelInfo) -> str:
        """The request pattern a run of `cfg` would use for the model `info` (checkpoint.info.ModelInfo)
        describes, in words; '' for a backend with one way of sending its work."""
        return ""

    def prepare(self, cfg: RunConfig, first_plan: Callable[[RunConfig], Any]) -> tuple[RunConfig, str]:
        """The choices made before the engine starts: `cfg` (a RunConfig) as the job should run it, and the
        choice in words ('' when none was made). `first_plan(cfg)` plans the job's first chunk (a
        pipeline.dry_run.PlanSummary), for a backend whose choice depends on the job's counts."""
        return cfg, ""

    def gpus_per_worker(self, cfg: RunConfig) -> float:
        """The GPUs one worker of `cfg` needs on a cluster that has GPUs (Ray's default)."""
        return 1.0

    def check_gpus(self, cfg: RunConfig, gpus: float) -> None:
        """Raise ConfigError when `gpus` GPUs per worker (> 0) cannot serve `cfg`."""

    def device(self, cfg: RunConfig) -> str:
        """The device a run of `cfg` uses (its `--device`, `auto` resolved: cuda where torch sees one)."""
        if cfg.device != "auto":
            return cfg.device
        import torch  # here, not at the top: a spec imports nothing heavy until it is asked

        return "cuda" if torch.cuda.is_available() else "cpu"


__all__ = ["Backend", "BackendOptions", "BackendPlan", "BackendSpec", "BranchResult"]
