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
  `load_backend` calls it at start-up and `run_job` again for a backend passed in. Read-only facts:
  `pattern` (the request pattern in words), `request_pattern` (its name), `kv_capacity_tokens`.
- `close()` frees the model/engine; backends are context managers.
Raises BackendError when the model cannot load or the engine dies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from ..checkpoint.trust import trust_hint
from ..core import BranchResult, Window
from ..errors import BackendError
from ..options import BackendOptions


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
        hint = trust_hint(BackendOptions(model=model, trust_remote_code=trust_remote_code), e)
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
    request_pattern: str = ""  # sglang: prefix-first | first-branch | multi-item
    kv_capacity_tokens: int | None = None  # sglang: the engine's KV pool (max_total_num_tokens)

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


__all__ = ["Backend", "BackendOptions", "BranchResult"]
