"""What a classifier checkpoint's `config.json` says (architecture, id2label), read without loading weights:
the classifier-head readout takes its labels from it, and its backends refuse a checkpoint that is not a
sequence classifier before any model loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BackendError


@dataclass(frozen=True)
class Checkpoint:
    """What classify needs from a checkpoint's config.json."""

    model: str
    labels: tuple[str, ...]
    architecture: str
    config: dict[str, Any]


def read_checkpoint(model: str) -> Checkpoint:
    """Read `config.json` (local folder or hub id). Raises BackendError when it cannot be read, when its
    architecture is not a `*ForSequenceClassification`, or when it has no usable `id2label`."""
    try:
        from transformers import PretrainedConfig

        cfg, _ = PretrainedConfig.get_config_dict(model)
    except Exception as e:
        raise BackendError(f"cannot read the config of {model!r}: {e}") from e
    archs = list(cfg.get("architectures") or [])
    cls_archs = [a for a in archs if a.endswith("ForSequenceClassification")]
    if not cls_archs:
        raise BackendError(
            f"{model}: not a sequence classifier (architectures {archs or 'missing'}); classify needs a "
            "*ForSequenceClassification checkpoint with a trained score head (use `run` for chat models)"
        )
    raw = cfg.get("id2label")
    if not raw:
        raise BackendError(
            f"{model}: config.json has no id2label, so the labels of the score head are unknown; "
            "add id2label (index → label name) to config.json"
        )
    try:
        by_idx = {int(k): v for k, v in raw.items()}
    except (TypeError, ValueError):
        raise BackendError(f"{model}: id2label keys must be integers, got {list(raw)}") from None
    if sorted(by_idx) != list(range(len(by_idx))):
        raise BackendError(f"{model}: id2label indices must be 0…{len(by_idx) - 1}, got {sorted(by_idx)}")
    labels = tuple(by_idx[i] for i in range(len(by_idx)))
    if not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
        raise BackendError(f"{model}: id2label names must be distinct non-empty strings, got {list(labels)}")
    if len(labels) < 2:
        raise BackendError(f"{model}: id2label has {len(labels)} label; classify needs at least 2")
    return Checkpoint(model, labels, cls_archs[0], cfg)
