"""What a checkpoint may do when it loads, decided before any loader or engine sees it: pickle weights only
with --allow-pickle, its own Python code only with --trust-remote-code. `check_model_trust` refuses a local
folder that would break either rule (its weight files read by weights.py, never loaded); `loader_options` are
the transformers options that keep the same rules for a hub id; `trust_hint` names the option in a loader's
refusal, so the message says how to allow it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import BackendError
from ..options import BackendOptions
from .weights import check_weights


def check_model_trust(opts) -> None:
    """Refuse a local checkpoint that would run code on load, or run without its weights, before any loader
    or engine sees it: weights only in pickle files (`pytorch_model.bin`, `*.pt`; unpickling runs code, and
    sglang retries a legacy-tar file with `weights_only=False`) without --allow-pickle, safetensors files
    that are not the model's weights (a decoy beside pickle weights), a corrupt safetensors header
    (`weights.check_weights`), or its own Python modules (`auto_map` in config.json /
    tokenizer_config.json) without --trust-remote-code. Hub ids are checked by the loaders themselves: the
    backends pass `use_safetensors=True` / `load_format="safetensors"` and `trust_remote_code`. Raises
    BackendError naming the option that allows it."""
    folder = Path(opts.model)
    if not folder.is_dir():
        return
    check_weights(folder, opts.allow_pickle)
    if not opts.trust_remote_code:
        for name in ("config.json", "tokenizer_config.json"):
            try:
                auto_map = json.loads((folder / name).read_text(encoding="utf-8")).get("auto_map")
            except (OSError, ValueError, AttributeError):
                continue
            if auto_map:
                raise BackendError(
                    f"{opts.model}: {name} names the checkpoint's own Python code (auto_map), which would run "
                    "when loaded; pass --trust-remote-code if you trust this checkpoint"
                )


def loader_options(opts: BackendOptions, weights: bool = True) -> dict[str, Any]:
    """transformers `from_pretrained` options that keep a checkpoint from running code: its own modules only
    with --trust-remote-code, pickle weights only with --allow-pickle (`use_safetensors=True` refuses them)."""
    kw: dict[str, Any] = {"trust_remote_code": opts.trust_remote_code}
    if weights and not opts.allow_pickle:
        kw["use_safetensors"] = True
    return kw


def trust_hint(opts: BackendOptions, e: BaseException) -> str:
    """The option to name when a loader refused what `loader_options` keeps out (a hub checkpoint with only
    pickle weights, or one that needs its own code), so the message says how to allow it."""
    msg = str(e)
    if "deserializing header" in msg or "SafetensorError" in type(e).__name__:  # a corrupt file, not pickle
        return " (a safetensors file of the checkpoint is corrupt or truncated; copy it again)"
    # sglang's loader with load_format=safetensors: "Cannot find any model weights with `<model>`"
    if not opts.allow_pickle and ("safetensors" in msg or "Cannot find any model weights" in msg):
        return " (only safetensors weights are loaded; pass --allow-pickle for pickle weights you trust)"
    if not opts.trust_remote_code and "trust_remote_code" in msg:
        return " (pass --trust-remote-code to run this checkpoint's own code, if you trust it)"
    return ""
