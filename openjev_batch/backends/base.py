"""The backend interface: label logprobs for the branches of a window of rows that share prefixes.

Contract (every backend):
- `tokenizer` is the model's Hugging Face tokenizer; the prompt stage tokenizes with it.
- `kv_budget_tokens()` is how many tokens a window may hold (the planner's budget).
- `prefill(window)` runs one forward pass per branch (prefix ids + suffix ids) and returns, for
  `window.rows[i].branches[j]`, `result[i][j]`: the natural-log probabilities (full-vocabulary
  log-softmax at the last position) of that branch's `label_ids`, in the same order, read by token id.
  A missing or non-finite logprob makes that branch's `error` set; it never raises for one branch.
  No token is decoded. The prefix is computed once per distinct prefix and reused (KV / radix cache).
- `warm_tokens` counts the prefix tokens computed by warm-up passes (not part of any branch), so that
  computed tokens = Σ (branch prompt − cached) + warm_tokens.
- `close()` frees the model/engine; backends are context managers.
Raises BackendError when the model cannot load or the engine dies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendError
from ..plan import Window


@dataclass(frozen=True)
class BackendOptions:
    """What a backend needs to start. `engine_args` pass through to the engine (sglang) unchanged."""

    model: str
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "auto"  # auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16
    tp_size: int = 1
    dp_size: int = 1
    mem_fraction_static: float | None = None
    attention_backend: str | None = None
    context_length: int | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    # Checkpoints are data too: pickle weights and a model's own Python code run only when asked for.
    allow_pickle: bool = False  # --allow-pickle: load .bin/.pt weights (pickles can execute code)
    trust_remote_code: bool = False  # --trust-remote-code: import the checkpoint's own modules (auto_map)


def refuse_engine_options(opts: BackendOptions, backend: str) -> None:
    """Raise BackendError naming each sglang engine option set for a backend that has no engine (hf),
    rather than ignoring it: a user who asked for `--tp-size 2` must not silently get one device."""
    given = [
        flag
        for flag, is_set in (
            ("--tp-size", opts.tp_size != 1),
            ("--dp-size", opts.dp_size != 1),
            ("--mem-fraction-static", opts.mem_fraction_static is not None),
            ("--attention-backend", opts.attention_backend is not None),
            ("--engine-arg " + ", ".join(sorted(opts.engine_args)), bool(opts.engine_args)),
        )
        if is_set
    ]
    if given:
        raise BackendError(
            f"the {backend} backend has no engine options; drop {'; '.join(given)} (sglang only)"
        )


def loader_options(opts: BackendOptions, weights: bool = True) -> dict[str, Any]:
    """transformers `from_pretrained` options that keep a checkpoint from running code: its own modules only
    with --trust-remote-code, pickle weights only with --allow-pickle (`use_safetensors=True` refuses them)."""
    kw: dict[str, Any] = {"trust_remote_code": opts.trust_remote_code}
    if weights and not opts.allow_pickle:
        kw["use_safetensors"] = True
    return kw


def trust_hint(opts: BackendOptions, e: BaseException) -> str:
    """The option to name when a loader refused what `loader_options` keeps out (a hub checkpoint with only
    pickle weights, or one that needs its own code), so the message says how to allow it."""
    msg = str(e)
    if not opts.allow_pickle and "safetensors" in msg:
        return " (only safetensors weights are loaded; pass --allow-pickle for pickle weights you trust)"
    if not opts.trust_remote_code and "trust_remote_code" in msg:
        return " (pass --trust-remote-code to run this checkpoint's own code, if you trust it)"
    return ""


@dataclass(frozen=True)
class BranchResult:
    """Label logprobs of one branch (aligned with its label_ids; NaN where missing) and its token counts."""

    logprobs: tuple[float, ...]
    prompt_tokens: int
    cached_tokens: int
    error: str | None = None


class Backend(ABC):
    name: str = "?"
    tokenizer: Any
    warm_tokens: int = 0
    scoring: str = "branches"  # the prefill path: one pass per branch; sglang may say "multi-item"

    @abstractmethod
    def kv_budget_tokens(self) -> int: ...

    @abstractmethod
    def prefill(self, window: Window) -> list[list[BranchResult]]: ...

    def check_alive(self) -> None:  # noqa: B027 - optional hook
        """Raise BackendError when the engine is dead (called after a failed window)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
