"""`Qwen2ForSequenceClassification` with a bias-free score head (as in transformers)."""

from __future__ import annotations

from sglang.srt.models import qwen2_classification as _upstream
from torch import nn

from ._head import ClassifierHeadProbe


class Qwen2ForSequenceClassification(ClassifierHeadProbe, _upstream.Qwen2ForSequenceClassification):
    def __init__(self, config, quant_config=None, prefix: str = "") -> None:
        super().__init__(config, quant_config, prefix)
        # Upstream: nn.Linear(hidden, num_labels) with a bias no checkpoint fills (sglang#38768).
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)


EntryClass = [Qwen2ForSequenceClassification]
