"""A local checkpoint's weight files, read without loading them: which files are the model's weights (its
index, else the standard names), whether each safetensors file's header parses.

The weights are the files transformers loads: those `model.safetensors.index.json` names, else
`model.safetensors`, else `model-*.safetensors` shards; pickle weights are `pytorch_model*.bin` and the like.
Another `*.safetensors` file in the folder (an adapter, a decoy) is not the model's weights: sglang's loader
globs `*.safetensors` and would start on it with uninitialised parameters (hostile trial, issue 25: it
answered NaN), so such a folder is refused on both backends.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import BackendError

ST_INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def safetensors_weights(folder: Path) -> list[Path]:
    """The model's safetensors weight files (its index's, else the standard names); [] when it has none.
    Raises BackendError for an index that does not parse or names a file that is missing."""
    index = folder / ST_INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BackendError(
                f"{folder}: {ST_INDEX} cannot be read ({e}); the weights are unknown"
            ) from None
        files = [folder / n for n in names]
        if missing := [n for n, f in zip(names, files, strict=True) if not f.is_file()]:
            raise BackendError(f"{folder}: {ST_INDEX} names {', '.join(missing[:3])}, which is missing")
        return files
    if (folder / "model.safetensors").is_file():
        return [folder / "model.safetensors"]
    return sorted(p for p in folder.glob("model-*.safetensors") if p.is_file())


def check_safetensors(path: Path) -> None:
    """Raise BackendError unless `path`'s safetensors header parses and its tensors cover the file exactly
    (the safetensors library's own check; no tensor is read)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), "np"):
            pass
    except Exception as e:  # SafetensorError, or an OSError on an unreadable file
        raise BackendError(
            f"{path}: not a valid safetensors file ({e}); the checkpoint is corrupt or truncated, "
            "copy it again"
        ) from None


def check_weights(folder: Path, allow_pickle: bool) -> None:
    """Refuse a folder whose weights are not safetensors (without `allow_pickle`), whose only safetensors
    files are not its weights, or whose safetensors weights are corrupt. A folder with no weight file at all
    is left to the loader (its message says what is missing). Raises BackendError naming the files."""
    weights = safetensors_weights(folder)
    for p in weights:
        check_safetensors(p)
    if weights:
        return
    files = sorted(p.name for p in folder.iterdir() if p.is_file())
    stray = [n for n in files if n.endswith(".safetensors")]
    not_weights = f"; {', '.join(stray[:3])} {'is' if len(stray) == 1 else 'are'} not the model's weights"
    pickles = [n for n in files if n.endswith(PICKLE_SUFFIXES)]
    if pickles and not allow_pickle:
        raise BackendError(
            f"{folder}: the weights are pickle files ({', '.join(pickles[:3])}), which can run code when loaded"
            f"{not_weights if stray else ''}; convert them to safetensors, or pass --allow-pickle if you "
            "trust this checkpoint"
        )
    if stray and not pickles:
        raise BackendError(
            f"{folder}: no model weights (model.safetensors, model-*.safetensors or the files {ST_INDEX} "
            f"names){not_weights}"
        )

