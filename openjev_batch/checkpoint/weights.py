"""A local checkpoint's weight files, read without loading them: which files are the model's weights (its
index, else the standard names), whether each safetensors file's header parses, and a fingerprint of the
checkpoint's content for the resume key (`pipeline.job.job_manifest`).

The weights are the files transformers loads: those `model.safetensors.index.json` names, else
`model.safetensors`, else `model-*.safetensors` shards; pickle weights are `pytorch_model*.bin` and the like.
Another `*.safetensors` file in the folder (an adapter, a decoy) is not the model's weights: sglang's loader
globs `*.safetensors` and would start on it with uninitialised parameters (hostile trial, issue 25: it
answered NaN), so such a folder is refused on both backends.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from ..errors import OUT_OF_MEMORY, BackendError, out_of_memory

ST_INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# the files besides the weights that change the numbers: the architecture, the tokenizer and chat template
_KEY_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
SMALL_FILE = 64 << 20  # weights below this are hashed whole: a same-shape swap in a tiny model is caught
_MAX_HEADER = 100_000_000  # safetensors' own limit (MAX_HEADER_SIZE)


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
        if out_of_memory(e):  # mapping the file failed: the checkpoint is fine
            raise BackendError(f"{path}: {OUT_OF_MEMORY}") from None
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


# Bytes read from each end of every tensor of a large safetensors file for its content key (see _file_key).
TENSOR_SAMPLE = 4096


def _tensor_sample_sha256(f, header: bytes, n: int, size: int) -> str:
    """sha256 over the first and last TENSOR_SAMPLE bytes of every tensor's data: a same-shape retrained or
    fine-tuned checkpoint has the same size and header, but training moves every element of a tensor it
    changes (hostile trial: two 78 MB seeds of one shape had one header and one size). ~8 KiB a tensor: a
    few MB of reads with seeks for a 35B checkpoint, not its 70 GB."""
    import json

    h = hashlib.sha256()
    try:
        meta = json.loads(header)
    except ValueError:
        return ""
    spans = sorted(
        tuple(v["data_offsets"]) for k, v in meta.items() if k != "__metadata__" and isinstance(v, dict)
    )
    base = 8 + n
    for a, b in spans:
        for start in {a, max(a, b - TENSOR_SAMPLE)}:
            if base + start < size:
                f.seek(base + start)
                h.update(f.read(min(TENSOR_SAMPLE, b - start)))
    return h.hexdigest()


def _file_key(p: Path) -> dict[str, Any]:
    """A weight file by content, cheaply: name, size, the sha256 of its safetensors header (it changes
    when a tensor's name, shape, dtype or offset does), for a small file the sha256 of the whole file, and
    for a large one the sha256 of a sample of every tensor's data (`_tensor_sample_sha256`)."""
    size = p.stat().st_size
    key: dict[str, Any] = {"name": p.name, "size": size}
    with open(p, "rb") as f:
        if size < SMALL_FILE:
            key["sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
            f.seek(0)
        if p.suffix == ".safetensors" and size >= 8:
            n = struct.unpack("<Q", f.read(8))[0]
            header = f.read(min(n, _MAX_HEADER))
            key["header_sha256"] = hashlib.sha256(header).hexdigest()
            if size >= SMALL_FILE:
                key["tensor_sample_sha256"] = _tensor_sample_sha256(f, header, n, size)
    return key


def _folder_key(folder: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for name in _KEY_FILES:
        if (folder / name).is_file():
            files[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    weights = [
        p
        for p in sorted(folder.iterdir())
        if p.is_file() and (p.name.endswith((".safetensors", ".index.json", *PICKLE_SUFFIXES)))
    ]
    return {"files": files, "weights": [_file_key(p) for p in weights]}


def model_fingerprint(model: str) -> dict[str, Any]:
    """What identifies a model's numbers, by content rather than by path: for a local folder, the sha256 of
    its config, tokenizer and chat-template files and each weight file's `_file_key`; for a hub id, the
    commit it resolves to (`hub_revision`), which names its files immutably. Changing the weights under the
    same path changes it (hostile trial, issue 25: a resume after a swap mixed 300 rows of one model with
    900 of another)."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        return _folder_key(folder)
    return {"hub_id": model, "revision": hub_revision(model)}


def hub_revision(model: str) -> str | None:
    """The commit a hub id resolves to, from its snapshot in the local cache (no network: the loader
    downloads); None when it is not cached yet (`run_job` records it once the loader fetched it)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a repo id: the loader will say so
        return None
    return Path(cached).parent.name if isinstance(cached, str) else None
