"""What a classifier checkpoint's `config.json` says (architecture, id2label), read without loading weights:
the classifier-head readout takes its labels from it, and its backends refuse a checkpoint that is not a
sequence classifier before any model loads.

A Qwen3.5 classifier may also be saved under its multimodal architecture name
(`Qwen3_5ForConditionalGeneration`, `Qwen3_5MoeForConditionalGeneration`: the openjev NLI cross-encoders of
the seeds) with a `score` head instead of `lm_head`; those are accepted when the weights' names (read from the
safetensors index or header, no tensor loaded) include `score.weight`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BackendError

# Multimodal architecture names under which a sequence classifier may be saved (score head, no lm_head).
MULTIMODAL_CLASSIFIERS = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
SCORE = "score.weight"


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
    if not cls_archs and (mm := [a for a in archs if a in MULTIMODAL_CLASSIFIERS]):
        names = weight_names(model)
        if SCORE not in names:
            raise BackendError(
                f"{model}: {mm[0]} without a classification head (its weights have no {SCORE}"
                f"{'' if names else ': no safetensors weights found'}); classify needs a sequence "
                "classifier's trained score head (use `run` for chat models)"
            )
        cls_archs = mm
    if not cls_archs:
        raise BackendError(
            f"{model}: not a sequence classifier (architectures {archs or 'missing'}); classify needs a "
            "*ForSequenceClassification checkpoint (or a Qwen3.5 *ForConditionalGeneration one with a "
            "score.weight) with a trained score head (use `run` for chat models)"
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


def weight_names(model: str) -> frozenset[str]:
    """The tensor names of `model`'s safetensors weights, from `model.safetensors.index.json` or the
    `model.safetensors` header (a local folder, or a hub id through huggingface_hub's header reads); no tensor
    is loaded. Empty when there are no safetensors weights. Raises BackendError when they cannot be read."""
    import json
    import struct
    from pathlib import Path

    d = Path(model)
    try:
        if d.is_dir():
            index = d / "model.safetensors.index.json"
            if index.is_file():
                return frozenset(json.loads(index.read_text())["weight_map"])
            names: set[str] = set()
            for f in sorted(d.glob("*.safetensors")):
                with f.open("rb") as fh:  # the format: u64 little-endian header length, then JSON header
                    (n,) = struct.unpack("<Q", fh.read(8))
                    names |= set(json.loads(fh.read(n))) - {"__metadata__"}
            return frozenset(names)
        from huggingface_hub import get_safetensors_metadata

        meta = get_safetensors_metadata(model)
        return frozenset(meta.weight_map)
    except Exception as e:
        raise BackendError(f"cannot read the weight names of {model!r}: {type(e).__name__}: {e}") from e
