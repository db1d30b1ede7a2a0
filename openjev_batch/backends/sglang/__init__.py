"""The sglang backends: engine.py (label logprobs), classifier.py (classifier heads), scheduler_patch.py
(runs in sglang's scheduler processes), heads/ (bias-free classification heads, an external model
package), moe_configs/ (fused-MoE tuning files). Names resolve lazily to engine.py."""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    return getattr(importlib.import_module(f"{__name__}.engine"), name)
