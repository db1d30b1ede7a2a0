"""The score head both Qwen3.5 classifiers share (imported by sglang only; needs torch and sglang): a bias-free
``score`` over the text model's hidden size on the last token's hidden state, pooled without normalisation, as
transformers' `GenericForSequenceClassification` pools it. No ``EntryClass``: sglang registers nothing here."""

from __future__ import annotations

import torch
from sglang.srt.layers.pooler import EmbeddingPoolerOutput, Pooler, PoolingType
from torch import nn

from ._head import ClassifierHeadProbe


class LastTokenScoreHead(ClassifierHeadProbe):
    """Mixin in front of sglang's multimodal Qwen3.5 class: its weight loader maps ``model.language_model.*``
    and ``model.visual.*`` and loads our ``score.weight`` through its plain-parameter branch."""

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
        pooled = out.embeddings  # [batch, hidden], the last token of each request
        return EmbeddingPoolerOutput(embeddings=self.score(pooled.to(self.score.weight.dtype)))
