"""The sglang backends: engine.py (label logprobs), classifier.py (classifier heads), scheduler_patch.py
(runs in sglang's scheduler processes; the patches in scheduler_patches/), heads/ (bias-free classification
heads, an external model package), moe_configs/ (fused-MoE tuning files). `SGLangBackend` resolves lazily to
engine.py; a submodule (`sglang.kwargs`) is imported as any module is."""

from __future__ import annotations

import importlib

__all__ = ["SGLangBackend"]


def installed() -> bool:
    """Whether the real sglang is importable. A folder named `sglang` on sys.path (a clone in the working
    folder under `python -m`, the tests' tests/backends/sglang/) imports as a namespace package with no
    origin: that is not sglang, and taking it for one sent the plain install's tests into sglang's modules."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    return spec is not None and spec.origin is not None


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.engine"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
