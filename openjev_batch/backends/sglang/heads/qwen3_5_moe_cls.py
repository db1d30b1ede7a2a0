"""A Qwen3.5-MoE sequence classifier, registered under `Qwen3_5MoeForConditionalGeneration`: the openjev NLI
cross-encoder's MoE variant (Qwen3.5-35B-A3B NLI).

GPU only, like qwen3_5_cls.py (the gated-delta-net layers need GPU kernels; this module does not import on
the CPU shims). Run on the H200 (docs/benchmarks.md, run 5c): a tiny random 8-expert checkpoint agreed with
the hf backend on 125 of 128 NLI pairs (max |Δ logit| 16.6 on a ~±10 scale; the cause is not established). sglang's multimodal Qwen3.5-MoE model loads the language model (``model.language_model.*``
→ ``model.*``, per-expert or fused expert weights), the vision tower (``model.visual.*``) and, through the
same loader's plain-parameter branch, our bias-free ``score.weight``; the last token is pooled without
normalisation, as transformers' `GenericForSequenceClassification` pools it.
"""

from __future__ import annotations

from sglang.srt.models import qwen3_5 as _upstream

from ._qwen3_5 import LastTokenScoreHead


class Qwen3_5MoeForConditionalGeneration(LastTokenScoreHead, _upstream.Qwen3_5MoeForConditionalGeneration):  # noqa: N801
    """sglang's Qwen3_5MoeForConditionalGeneration with the shared bias-free score head (_qwen3_5.py)."""


EntryClass = [Qwen3_5MoeForConditionalGeneration]
