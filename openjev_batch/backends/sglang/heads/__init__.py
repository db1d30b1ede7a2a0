"""An external model package for sglang: bias-free classification heads.

sglang loads it in its scheduler process when ``SGLANG_EXTERNAL_MODEL_PACKAGE=openjev_batch.backends.sglang.heads``
(``sglang/srt/models/registry.py``: every *submodule* is imported, each ``EntryClass`` is registered under
its class ``__name__`` with ``overwrite=True``; an import error only logs a warning). The classify sglang
backend sets the variable only while its own engine starts, then checks that the override really loaded:
every class here answers ``get_weights_by_name(MARKER)`` with ``[HEAD_VERSION, has_bias, num_labels]``,
which the built-in classes cannot (sglang returns None for them).

Why: sglang 0.5.17–0.5.19's ``Qwen3ForSequenceClassification`` / ``Qwen2ForSequenceClassification`` build
the score head as ``nn.Linear(hidden, num_labels)`` *with* a bias, but transformers checkpoints have none
(``GenericForSequenceClassification`` is bias-free), so the bias keeps its random initial value and every
logit is shifted (measured 0.059 on a tiny model). Upstream fix: sgl-project/sglang#38777 (for #38768).

This ``__init__`` imports neither sglang nor torch: the product reads the tables below without sglang.
"""

from __future__ import annotations

PACKAGE = __name__
MARKER = "openjev_batch.classifier_head"
HEAD_VERSION = 1.0

# Checkpoint architecture -> (our submodule, the sglang registry key our class replaces, the architecture
# the engine must be told the checkpoint has, or None to keep the checkpoint's own).
OVERRIDES: dict[str, tuple[str, str, str | None]] = {
    "Qwen3ForSequenceClassification": ("qwen3_cls", "Qwen3ForSequenceClassification", None),
    "Qwen2ForSequenceClassification": ("qwen2_cls", "Qwen2ForSequenceClassification", None),
    # Qwen3.5 configs have vision/text sub-configs, so sglang treats them as multimodal and wants the
    # multimodal architecture name (its processor registry and hybrid linear-attention set-up key on it):
    # the engine is told `Qwen3_5ForConditionalGeneration` / `Qwen3_5MoeForConditionalGeneration`, and our
    # class registered under that name is a classifier. A checkpoint saved under the multimodal name with a
    # score head (the seeds' NLI cross-encoders; checkpoint/classifier.py checks `score.weight`) maps the same.
    # GPU only (the linear-attention kernels have no CPU build here).
    "Qwen3_5ForSequenceClassification": (
        "qwen3_5_cls",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
    ),
    "Qwen3_5ForConditionalGeneration": (
        "qwen3_5_cls",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
    ),
    "Qwen3_5MoeForSequenceClassification": (
        "qwen3_5_moe_cls",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    ),
    "Qwen3_5MoeForConditionalGeneration": (
        "qwen3_5_moe_cls",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
    ),
}

# Overridden architectures whose engine runs text only: sglang reads their config as multimodal and would load
# an image processor at start (`OSError: Can't load image processor …` without preprocessor_config.json,
# seen on sglang 0.5.17); `enable_multimodal=False` makes its tokenizer manager, scheduler and TP worker load
# the plain tokenizer instead. A classify request is token ids only, so nothing needs the processor.
TEXT_ONLY = frozenset(a for a in OVERRIDES if a.startswith("Qwen3_5"))
