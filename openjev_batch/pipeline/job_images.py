"""Whether a job's input has image rows, read before the engine starts (issue 41): the one choice `run_job`, the
CLI's pattern choice and `--dry-run` make alike, so an sglang engine for a vision-language model starts
multimodal for image rows and text only otherwise."""

from __future__ import annotations

from ..config import RunConfig
from .input.formats import may_have_images


def choose_images(cfg: RunConfig) -> tuple[RunConfig, str]:
    """Whether the job's input has image rows (`input.formats.may_have_images`: a column, a nested field or a
    JSON key naming an image, over the whole input), read before the engine starts: an sglang engine for a
    vision-language model then starts multimodal and answers them (backends/sglang/images.py
    `starts_multimodal`), a text-only job keeps the text-only engine (and a Qwen3.5/3.6 hybrid its GDN fork).
    Returns the config with `images` set and the choice in words ('' when there are none, or it was set)."""
    if cfg.images is not None or cfg.backend != "sglang":
        return cfg, ""
    has = may_have_images(cfg.input)
    cfg = cfg.model_copy(update={"images": has})
    return cfg, ("the input has image rows: a vision-language model's sglang engine starts multimodal "
                 "(no multi-item scoring)" if has else "")  # fmt: skip
