"""The transformers backends: causal.py (label logprobs, the reference) and classifier.py (classifier
heads). `HFBackend` resolves lazily to causal.py (torch loads with it); a submodule (`hf.vision`) is
imported as any module is."""

from __future__ import annotations

import importlib

__all__ = ["HFBackend"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.causal"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
