"""The transformers backends: causal.py (label logprobs, the reference) and classifier.py (classifier
heads). Names resolve lazily to causal.py."""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    return getattr(importlib.import_module(f"{__name__}.causal"), name)
