"""`Qwen3_5MoeForSequenceClassification`, which transformers 5.12 lacks (it has the dense
`Qwen3_5ForSequenceClassification` only): the same two lines as the dense class, over the MoE base model.
It saves and loads the names sglang's `Qwen3_5MoeForConditionalGeneration` reads (`model.language_model.*`,
`model.visual.*`) plus `score.weight` [num_labels, hidden], bias-free, pooled by the caller."""

from __future__ import annotations

from transformers.modeling_layers import GenericForSequenceClassification
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoePreTrainedModel


class Qwen3_5MoeForSequenceClassification(GenericForSequenceClassification, Qwen3_5MoePreTrainedModel):  # noqa: N801
    pass
