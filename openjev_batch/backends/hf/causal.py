"""`hf`: the transformers reference backend (CPU or GPU), exact numbers every faster backend must match.

Per distinct prefix: one forward pass with a KV cache. Per branch: one forward pass of the suffix on
top of a copy of that cache, `logits_to_keep=1`, log-softmax at the last position. A row therefore costs
one prefix pass plus one suffix pass per question (N+1), with no padding, so results do not depend on
batch composition.

Why a copy, not `cache.crop(len(prefix))` after each branch: transformers ≥ 5.20 refuses a positive
`crop` (`ValueError: Calling crop with a positive value … is not supported`; 5.20.0–5.24.0 failed on
every row), and a crop never was right for hybrid models: their linear-attention layers (Qwen3.5/3.6
Gated DeltaNet, Mamba-style conv states) update their recurrent state in place and `crop` leaves it
untouched, so the next branch would start from the previous branch's state. `copy.deepcopy` of the
prefix cache is the one operation every transformers cache (dynamic, sliding-window, linear-attention,
hybrid) supports from 5.x on; its cost is one copy of the prefix KV per branch, which the suffix pass
already pays once more (`DynamicLayer.update` concatenates the new keys onto the prefix's).
"""

from __future__ import annotations

import copy
import inspect
import math

import torch

from ...core import Window
from ..base import Backend, BackendOptions, BranchResult
from .load import device_and_dtype, load_pretrained


class HFBackend(Backend):
    name = "hf"

    def __init__(self, opts: BackendOptions):
        from transformers import AutoModelForCausalLM

        opts.check_backend("hf")  # ConfigError naming an sglang option given here
        device, dtype = device_and_dtype(opts)
        self.tokenizer, model = load_pretrained(AutoModelForCausalLM, opts, dtype, "model")
        self.model = model.to(device).eval()
        self.device = device
        # Newer transformers (5.24; not 5.12) name the forward argument `cache`, not `past_key_values`;
        # the old name still works there with a FutureWarning ("will be removed in version 5.40.0").
        # Pass the one this version's forward declares.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.context_length = opts.context_length or getattr(
            self.model.config, "max_position_embeddings", None
        )

    def kv_budget_tokens(self) -> int:
        # One row's cache is live at a time; the window size only bounds host memory.
        return 1 << 20

    @torch.inference_mode()
    def _last_logprobs(self, ids: tuple[int, ...], cache) -> torch.Tensor:
        x = torch.tensor([ids], device=self.device)  # [1, T]
        out = self.model(input_ids=x, **{self._cache_arg: cache}, use_cache=True, logits_to_keep=1)
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # [V]

    @torch.inference_mode()
    def prefill(self, window: Window) -> list[list[BranchResult]]:
        from transformers import DynamicCache

        results: list[list[BranchResult]] = []
        prefix_cache, cached_prefix = None, None
        for row in window.rows:
            n = len(row.prefix)
            if row.prefix != cached_prefix:  # rows are prefix-sorted: equal prefixes are adjacent
                prefix_cache = DynamicCache(config=self.model.config)
                self._last_logprobs(row.prefix, prefix_cache)
                self.warm_tokens += n
                cached_prefix = row.prefix
            out = []
            for b in row.branches:
                total = n + len(b.suffix)
                if self.context_length and total > self.context_length:
                    out.append(
                        BranchResult(
                            (math.nan,) * len(b.label_ids),
                            total,
                            0,
                            f"branch has {total} tokens, model context is {self.context_length}",
                        )
                    )
                    continue
                # the prefix cache itself is never run on, so no branch sees another's state
                lp = self._last_logprobs(b.suffix, copy.deepcopy(prefix_cache))
                vals = tuple(lp[list(b.label_ids)].tolist())
                err = None if all(math.isfinite(v) for v in vals) else "non-finite label logprob"
                out.append(BranchResult(vals, total, n, err))
            results.append(out)
            self.report([(row, j, r) for j, r in enumerate(out)])
        return results

    def close(self) -> None:
        self.model = None
