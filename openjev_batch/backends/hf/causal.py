"""`hf`: the transformers reference backend (CPU or GPU), exact numbers every faster backend must match.

Per distinct prefix: one forward pass with a KV cache, counted in the prefix's first answered branch (its
`cached_tokens` is 0, no warm-up tokens). Per branch: one forward pass of the suffix on top of a copy of that cache, `logits_to_keep=1`, log-softmax at the last position. A row therefore costs
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
from ...images import ImageProblem
from ..base import Backend, BackendOptions, BranchResult
from .load import device_and_dtype, load_pretrained
from .vision import VisionInputs, is_vision_checkpoint


class HFBackend(Backend):
    name = "hf"

    def __init__(self, opts: BackendOptions):
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

        opts.check_backend("hf")  # ConfigError naming an sglang option given here
        device, dtype = device_and_dtype(opts)
        # a vision-language checkpoint loads with its vision tower, so rows may carry images (vision.py)
        vision = is_vision_checkpoint(opts.model, opts.trust_remote_code)
        auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        self.tokenizer, model = load_pretrained(auto, opts, dtype, "model")
        self.model = model.to(device).eval()
        self.device = device
        self.vision = VisionInputs(opts.model, self.model, device, opts.trust_remote_code) if vision else None
        # Newer transformers (5.24; not 5.12) name the forward argument `cache`, not `past_key_values`;
        # the old name still works there with a FutureWarning ("will be removed in version 5.40.0").
        # Pass the one this version's forward declares.
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.context_length = opts.context_length or getattr(
            self.model.config.get_text_config(), "max_position_embeddings", None
        )

    def kv_budget_tokens(self) -> int:
        # One row's cache is live at a time; the window size only bounds host memory.
        return 1 << 20

    @torch.inference_mode()
    def _last_logprobs(self, ids: tuple[int, ...], cache, **inputs) -> torch.Tensor:
        """`inputs`: an image row's pixel values and positions (vision.py)."""
        x = torch.tensor([ids], device=self.device)  # [1, T]
        out = self.model(input_ids=x, **{self._cache_arg: cache}, use_cache=True, logits_to_keep=1, **inputs)
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # [V]

    def _prefix(self, row) -> tuple[object, int | None]:
        """The KV cache of `row`'s prefix, and where its suffixes' positions start (None: a text row, whose
        positions the model counts from the cache). Raises ImageProblem for an image it cannot run."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config.get_text_config())
        if not row.images:
            self._last_logprobs(row.prefix, cache)
            return cache, None
        if self.vision is None:
            raise ImageProblem(f"the model {self.model.name_or_path} takes no images (no vision tower)")
        inputs, start = self.vision.prefix_inputs(row.prefix, row.images)
        self._last_logprobs(row.prefix, cache, **inputs)
        return cache, start

    @torch.inference_mode()
    def prefill(self, window: Window) -> list[list[BranchResult]]:
        results: list[list[BranchResult]] = []
        prefix_cache, cached_prefix, start, image_error, owed = None, None, None, None, False
        for row in window.rows:
            n = len(row.prefix)
            # rows are prefix-sorted: equal prefixes are adjacent; equal ids with other images are another prefix
            key = (row.prefix, tuple(im.sha256 for im in row.images))
            if key != cached_prefix:
                try:
                    prefix_cache, start = self._prefix(row)
                    image_error, owed = None, True
                except ImageProblem as e:
                    prefix_cache, image_error = None, f"row {row.row_id}: image: {e}"
                cached_prefix = key
            if image_error is not None:
                out = [BranchResult((math.nan,) * len(b.label_ids), n, 0, image_error) for b in row.branches]
            else:
                out, owed = self._branches(row, prefix_cache, start, owed)
            results.append(out)
            self.report([(row, j, r) for j, r in enumerate(out)])
        return results

    def _branches(self, row, prefix_cache, start, owed: bool) -> tuple[list[BranchResult], bool]:
        """`row`'s branches on its prefix cache. `owed`: the prefix pass has not been counted yet. It ran for
        this prefix's first answered branch, so that branch reports cached 0 (it computed its whole prompt)
        and every later one the prefix: Σ (branch − cached) over the answered records is what the job
        computed, and the summary's cache hit rate is Σ cached / Σ branch (issue 34.8: the first branch
        said cached = prefix too, and the summary counted the pass again as warm-up). Returns the results
        and whether the pass is still owed (every branch so far failed)."""
        n, out = len(row.prefix), []
        for b in row.branches:
            total = n + len(b.suffix)
            if self.context_length and total > self.context_length:
                too_long = f"branch has {total} tokens, model context is {self.context_length}"
                out.append(BranchResult((math.nan,) * len(b.label_ids), total, 0, too_long))
                continue
            # the prefix cache itself is never run on, so no branch sees another's state
            pos = (
                {} if start is None or self.vision is None else {"position_ids": self.vision.suffix_positions(start, len(b.suffix))}
            )
            lp = self._last_logprobs(b.suffix, copy.deepcopy(prefix_cache), **pos)
            vals = tuple(lp[list(b.label_ids)].tolist())
            err = None if all(math.isfinite(v) for v in vals) else "non-finite label logprob"
            out.append(BranchResult(vals, total, 0 if owed and err is None else n, err))
            owed = owed and err is not None
        return out, owed

    def close(self) -> None:
        self.model = None
