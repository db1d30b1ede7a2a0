"""A Qwen3.5 sequence classifier, registered under `Qwen3_5ForConditionalGeneration`.

NOT RUN in this repository: Qwen3.5's gated-delta-net layers need GPU kernels (this module does not even
import on the CPU shims), and no GPU run was made for it. It reuses sglang's multimodal Qwen3.5 model
(its weight loader maps transformers' ``model.language_model.*`` / ``model.visual.*`` names), pools the
last token (no normalisation) and applies a bias-free ``score`` head loaded from ``score.weight``.
The classify backend tells the engine the checkpoint is ``Qwen3_5ForConditionalGeneration`` (see
``OVERRIDES`` in ``__init__``) and starts it with ``is_embedding=True`` and ``enable_multimodal=False``
(text only: no image processor). The MoE variant: qwen3_5_moe_cls.py.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.pooler import EmbeddingPoolerOutput, Pooler, PoolingType
from sglang.srt.models import qwen3_5 as _upstream
from torch import nn

from ._head import ClassifierHeadProbe


class Qwen3_5ForConditionalGeneration(ClassifierHeadProbe, _upstream.Qwen3_5ForConditionalGeneration):  # noqa: N801
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        super().__init__(config, quant_config, prefix)
        text = getattr(config, "text_config", None) or config
        self.score = nn.Linear(text.hidden_size, config.num_labels, bias=False)
        self.pooler = Pooler(pooling_type=PoolingType.LAST, normalize=False)

    @torch.no_grad()
    def forward(self, input_ids, positions, forward_batch, get_embedding: bool = True, pp_proxy_tensors=None):
        out = super().forward(
            input_ids, positions, forward_batch, get_embedding=True, pp_proxy_tensors=pp_proxy_tensors
        )
        if not isinstance(out, EmbeddingPoolerOutput):  # not the last pipeline rank: hidden states
            return out
        pooled = out.embeddings
        return EmbeddingPoolerOutput(embeddings=self.score(pooled.to(self.score.weight.dtype)))


EntryClass = [Qwen3_5ForConditionalGeneration]
