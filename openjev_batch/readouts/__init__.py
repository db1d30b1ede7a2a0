"""Readouts: what a row asks and how its answer is read (base.py has the protocol).

- `label-logprobs` (label_logprobs.py): questions answered from option-label next-token logprobs (`run`).
- `classifier-head` (classifier_head.py): a sequence-classification head's logits (`classify`).

Adding a readout: a module with a `Readout` subclass, its name in NAMES and `base_columns`, and a backend
class per backend for its `backend_kind` (backends/__init__.py).
"""

from __future__ import annotations

NAMES = ("label-logprobs", "classifier-head")


def base_columns(name: str) -> tuple[str, ...]:
    """The output columns a readout always writes (a kept input column must not reuse one)."""
    if name == "classifier-head":
        from .classifier_head import BASE_COLUMNS

        return BASE_COLUMNS
    from .label_logprobs import OUTPUT_SCHEMA

    return tuple(OUTPUT_SCHEMA.names)
