"""The sglang backends: engine.py (label logprobs), classifier.py (classifier heads), scheduler_patch.py
(runs in sglang's scheduler processes; the patches in scheduler_patches/), heads/ (bias-free classification
heads, an external model package), moe_configs/ (fused-MoE tuning files). `SGLangBackend` resolves lazily to
engine.py; a submodule (`sglang.kwargs`) is imported as any module is."""

from __future__ import annotations

import importlib

__all__ = ["SGLangBackend"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.engine"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
