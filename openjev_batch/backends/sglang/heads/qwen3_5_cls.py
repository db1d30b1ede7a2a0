"""A Qwen3.5 sequence classifier, registered under `Qwen3_5ForConditionalGeneration`.

GPU only: Qwen3.5's gated-delta-net layers need GPU kernels (this module does not import on the CPU shims).
Run on the H200 (docs/benchmarks.md, run 5c): tiny random checkpoints, 128 NLI pairs against the hf backend,
argmax agreement 100 % (saved as *ForSequenceClassification) and 99.2 % (the seeds' ConditionalGeneration form).
It reuses sglang's multimodal Qwen3.5 model
(its weight loader maps transformers' ``model.language_model.*`` / ``model.visual.*`` names), pools the
last token (no normalisation) and applies a bias-free ``score`` head loaded from ``score.weight``.
The classify backend tells the engine the checkpoint is ``Qwen3_5ForConditionalGeneration`` (see
``OVERRIDES`` in ``__init__``) and starts it with ``is_embedding=True`` and ``enable_multimodal=False``
(text only: no image processor). The MoE variant: qwen3_5_moe_cls.py.
"""

from __future__ import annotations

from sglang.srt.models import qwen3_5 as _upstream

from ._qwen3_5 import LastTokenScoreHead


class Qwen3_5ForConditionalGeneration(LastTokenScoreHead, _upstream.Qwen3_5ForConditionalGeneration):  # noqa: N801
    """sglang's Qwen3_5ForConditionalGeneration with the shared bias-free score head (_qwen3_5.py)."""


EntryClass = [Qwen3_5ForConditionalGeneration]
