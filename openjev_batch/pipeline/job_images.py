"""Whether a job's input has image rows, read before the engine starts (issue 41): the one choice `run_job`, the
CLI's pattern choice and `--dry-run` make alike, so an sglang engine for a vision-language model starts
multimodal for image rows and text only otherwise."""

from __future__ import annotations

from ..backends import SPECS
from ..config import RunConfig
from .input.formats import may_have_images


def needs_images_choice(cfg: RunConfig) -> bool:
    """Whether `choose_images` would read the input: not set yet, and the backend's engine is told at start."""
    return cfg.images is None and SPECS[cfg.backend].images_at_start


def choose_images(cfg: RunConfig) -> tuple[RunConfig, str]:
    """Whether the job's input has image rows (`input.formats.may_have_images`: a column, a nested field or a
    JSON key naming an image, over the whole input), read before the engine starts: an sglang engine for a
    vision-language model then starts multimodal and answers them (backends/sglang/images.py
    `starts_multimodal`), a text-only job keeps the text-only engine (and a Qwen3.5/3.6 hybrid its GDN fork).
    Read only for a backend whose spec says its engine is told at start (`images_at_start`). Returns the config
    with `images` set and the choice in words ('' when there are none, or it was set, or the backend takes no
    such choice)."""
    if not needs_images_choice(cfg):
        return cfg, ""
    has = may_have_images(cfg.input)
    cfg = cfg.model_copy(update={"images": has})
    return cfg, ("the input has image rows: a vision-language model's sglang engine starts multimodal "
                 "(no multi-item scoring)" if has else "")  # fmt: skip
