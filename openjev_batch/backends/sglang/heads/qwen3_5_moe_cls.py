"""A Qwen3.5-MoE sequence classifier, registered under `Qwen3_5MoeForConditionalGeneration`: the openjev NLI
cross-encoder's MoE variant (Qwen3.5-35B-A3B NLI).

GPU only, like qwen3_5_cls.py (the gated-delta-net layers need GPU kernels; this module does not import on
the CPU shims). sglang's multimodal Qwen3.5-MoE model loads the language model (``model.language_model.*``
→ ``model.*``, per-expert or fused expert weights), the vision tower (``model.visual.*``) and, through the
same loader's plain-parameter branch, our bias-free ``score.weight``; the last token is pooled without
normalisation, as transformers' `GenericForSequenceClassification` pools it.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.pooler import EmbeddingPoolerOutput, Pooler, PoolingType
from sglang.srt.models import qwen3_5 as _upstream
from torch import nn

from ._head import ClassifierHeadProbe


class Qwen3_5MoeForConditionalGeneration(ClassifierHeadProbe, _upstream.Qwen3_5MoeForConditionalGeneration):  # noqa: N801
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
        return EmbeddingPoolerOutput(embeddings=self.score(out.embeddings.to(self.score.weight.dtype)))


EntryClass = [Qwen3_5MoeForConditionalGeneration]
