"""Images on the hf backend: a vision-language checkpoint (a `vision_config` and an image processor; Qwen3.5/3.6
`*ForConditionalGeneration`) loads with its vision tower through `AutoModelForImageTextToText`, and a row's
images enter its prefix pass as the checkpoint's own image processor makes them (`pixel_values`,
`image_grid_thw`); the prefix cache, images included, is then reused by every question of the row.

Positions: Qwen3.5's multimodal RoPE gives an image's tokens 3-D positions and the text after it positions
that continue from the image's extent, not from its token count. The model computes them itself only on a
pass without a cache and otherwise keeps `rope_deltas` from the last such pass on the model object, which a
later row would inherit; so every pass here gets explicit `position_ids`: the prefix's from the model's
`get_rope_index`, each suffix's continuing from the prefix's largest position + 1.
"""

from __future__ import annotations

from typing import Any

import torch

from ...checkpoint.info import load_config
from ...images import ImageProblem


def is_vision_checkpoint(model: str, trust_remote_code: bool = False) -> bool:
    """Whether `model` (a folder or a cached hub id) is a vision-language checkpoint: its config.json has a
    `vision_config` and an image processor loads (a text-only Qwen3.5 export has neither)."""
    cfg = load_config(model) or {}
    if "vision_config" not in cfg:
        return False
    from transformers import AutoImageProcessor

    try:
        AutoImageProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - no preprocessor_config.json: the checkpoint is run as text only
        return False
    return True


class VisionInputs:
    """The image processor of a loaded vision-language model, turning a row's images into its inputs."""

    def __init__(self, model_name: str, model: Any, device: str, trust_remote_code: bool = False):
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(model_name, trust_remote_code=trust_remote_code)
        self.model, self.device = model, device
        self.image_id = int(model.config.image_token_id)
        self.merge = int(getattr(self.processor, "merge_size", 1))

    def prefix_inputs(self, prefix: tuple[int, ...], images: tuple) -> tuple[dict[str, Any], int]:
        """The forward arguments of a prefix with `images` (ImageRefs) and the position its suffixes start
        at. Raises ImageProblem (an image that cannot be read again, or whose token count differs from the
        prompt's)."""
        pil = [im.load() for im in images]
        out = self.processor(images=pil, return_tensors="pt")
        grid = out["image_grid_thw"]
        want = int((grid.prod(-1) // self.merge**2).sum())
        have = sum(1 for i in prefix if i == self.image_id)
        if want != have:
            raise ImageProblem(f"the processor makes {want} image tokens, the prompt holds {have}")
        ids = torch.tensor([prefix])
        mm = (ids == self.image_id).int()
        pos, _ = self.model.model.get_rope_index(ids, mm, image_grid_thw=grid)  # [3, 1, T]
        args = {
            "pixel_values": out["pixel_values"].to(self.device, self.model.dtype),
            "image_grid_thw": grid.to(self.device),
            "position_ids": pos.to(self.device),
        }
        return args, int(pos.max()) + 1

    def suffix_positions(self, start: int, n: int) -> torch.Tensor:
        """Text positions start … start + n − 1 on all three RoPE axes, [3, 1, n]."""
        return torch.arange(start, start + n, device=self.device).view(1, 1, -1).expand(3, 1, -1)
