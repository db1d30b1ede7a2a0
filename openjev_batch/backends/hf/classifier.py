"""`hf` classifier: `AutoModelForSequenceClassification`, the reference the sglang classifier must match.

Right-padded batches (rows of a window sorted by length, at most `batch_tokens` padded tokens a pass),
float32 on the CPU. The score head is applied to the hidden state of each row's last *real* token
(position from the attention mask), which is what transformers' `GenericForSequenceClassification` pools
for any prompt that does not end in the pad token, and what sglang's LAST pooling takes in every case
(transformers takes "the rightmost token that is not the pad id", so a prompt ending in the pad token
would be pooled one token early there). A pad id is set when the config has none (Qwen3's default), so
batches > 1 work. No prefix KV reuse: every row is one full forward pass.

A Qwen3.5-MoE checkpoint (model type `qwen3_5_moe`, saved as `Qwen3_5MoeForConditionalGeneration` with a score
head or as `Qwen3_5MoeForSequenceClassification`) loads through our `qwen3_5_moe_cls` class: transformers
5.12 has no sequence classifier for it. The dense Qwen3.5 one loads through transformers' own class under
either architecture name (the Auto class picks it by model type).

A vision-language classifier (Qwen3.5's: a `vision_config` and an image processor) keeps its vision tower (the
sequence classifier's base is the multimodal model): a row with images runs alone, one pass, its images as
the checkpoint's image processor makes them and explicit M-RoPE positions (vision.py).
"""

from __future__ import annotations

from typing import Any

import torch

from ...checkpoint.classifier import read_checkpoint
from ...core import BranchResult, Window
from ...errors import BackendError
from ...images import ImageProblem
from ..base import Backend, BackendOptions
from .load import device_and_dtype, load_pretrained
from .vision import VisionInputs, is_vision_checkpoint


def default_batch_tokens(device: str) -> int:
    """--batch-tokens when not given. A CPU gains nothing from wide batches and pays for their padding: the
    quick start's classify ran 2.4× slower with 16384 padded tokens a pass than with 256 (issue 34.6); a
    GPU needs them wide to be busy."""
    return 256 if device == "cpu" else 16_384

class HFClassifier(Backend):
    name = "hf"
    kind = "classifier-head"

    def __init__(self, opts: BackendOptions):
        from transformers import AutoModelForSequenceClassification

        opts.check_backend("hf")  # ConfigError naming an sglang option given here
        ckpt = read_checkpoint(opts.model)  # refuse a checkpoint before any weights load
        device, dtype = device_and_dtype(opts)
        auto: Any = AutoModelForSequenceClassification
        if ckpt.config.get("model_type") == "qwen3_5_moe":
            # lazy: transformers' Qwen3.5 MoE classes
            from .qwen3_5_moe_cls import Qwen3_5MoeForSequenceClassification as auto
        self.tokenizer, model = load_pretrained(auto, opts, dtype, "classifier")
        self.model = model.to(device).eval()
        self.labels = ckpt.labels
        if self.model.config.num_labels != len(self.labels):
            raise BackendError(
                f"{opts.model}: the model has {self.model.config.num_labels} labels, id2label {len(self.labels)}"
            )
        text_cfg = self.model.config.get_text_config()
        pad = text_cfg.pad_token_id
        if pad is None:
            pad = self.tokenizer.pad_token_id
            if pad is None:
                pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
            text_cfg.pad_token_id = self.model.config.pad_token_id = pad
        self.pad_id = int(pad)
        self.device = device
        self.batch_tokens = opts.hf.batch_tokens or default_batch_tokens(device)
        self.context_length = opts.context_length or getattr(text_cfg, "max_position_embeddings", None)
        self._base: Any = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)  # None: no base
        self._score = getattr(self.model, "score", None)

        # the multimodal base (a text-only class over a VL config has no M-RoPE index: its image rows fail)
        vision = hasattr(self._base, "get_rope_index") and is_vision_checkpoint(opts.model, opts.trust_remote_code)
        self.vision = VisionInputs(opts.model, self.model, device, opts.trust_remote_code) if vision else None

    def kv_budget_tokens(self) -> int:
        # Batches are cut by `batch_tokens`; the window size only bounds host memory.
        return 1 << 20

    @torch.inference_mode()
    def forward(self, batch: list[tuple[int, ...]]) -> list[list[float]]:
        """Raw logits of each prompt of `batch`, one padded forward pass."""
        n = max(len(x) for x in batch)
        ids = torch.full((len(batch), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), n), dtype=torch.long)
        for i, x in enumerate(batch):
            ids[i, : len(x)] = torch.tensor(x)
            mask[i, : len(x)] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        if self._base is not None and isinstance(self._score, torch.nn.Linear):
            h = self._base(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            last = mask.sum(1) - 1
            logits = self._score(h[torch.arange(len(batch), device=h.device), last])
        else:  # a head other than `score`: transformers' own pooling
            logits = self.model(input_ids=ids, attention_mask=mask).logits
        return logits.float().cpu().tolist()

    @torch.inference_mode()
    def forward_images(self, ids: tuple[int, ...], images: tuple) -> list[float]:
        """Raw logits of one prompt holding `images` (ImageRefs), one pass. Raises ImageProblem."""
        if self.vision is None or not isinstance(self._score, torch.nn.Linear):
            raise ImageProblem(f"the model {self.model.name_or_path} takes no images (no vision tower)")
        inputs, _ = self.vision.prefix_inputs(ids, images)
        x = torch.tensor([ids], device=self.device)
        h = self._base(input_ids=x, use_cache=False, **inputs).last_hidden_state
        return self._score(h[0, -1]).float().cpu().tolist()

    def prefill(self, window: Window) -> list[list[BranchResult]]:
        """One branch per row: its raw logits (rows sorted by length into padded batches)."""
        results, todo = self.one_branch_rows(window)
        for i, ids in [t for t in todo if window.rows[t[0]].images]:  # image rows: alone, one pass each
            rp = window.rows[i]
            try:
                results[i] = [BranchResult(tuple(self.forward_images(ids, rp.images)), len(ids), 0)]
            except ImageProblem as e:
                results[i] = [BranchResult((), len(ids), 0, f"image: {e}")]
            self.report([(rp, 0, results[i][0])])
        todo = [t for t in todo if not window.rows[t[0]].images]
        todo.sort(key=lambda t: len(t[1]))
        start = 0
        while start < len(todo):
            end = start + 1  # longest last: the padded size of todo[start:end] is len(todo[end-1]) * rows
            while end < len(todo) and (end + 1 - start) * len(todo[end][1]) <= self.batch_tokens:
                end += 1
            part = todo[start:end]
            for (i, ids), vals in zip(part, self.forward([x for _, x in part]), strict=True):
                results[i] = [BranchResult(tuple(vals), len(ids), 0)]
            self.report([(window.rows[i], 0, results[i][0]) for i, _ in part])
            start = end
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self.model = self._base = self._score = None
