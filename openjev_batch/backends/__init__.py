"""Backends, chosen by name and the readout kind they serve, imported lazily: the `hf` path never imports
sglang (or CUDA). Each backend's facts are its spec (base.BackendSpec, backends/<name>/spec.py: light, no
engine), which the pipeline, the dry run, Ray, eval and the display ask instead of naming a backend: `SPECS`.
Adding a backend: a folder with a `Backend` subclass (base.py) per readout kind it serves and its `spec.py`,
one `SPECS` line below, and its name in `options.BACKENDS`."""

from __future__ import annotations

import importlib

from ..checkpoint.trust import check_model_trust
from ..errors import BackendError
from ..options import BACKENDS
from ..registry import Registry
from .base import Backend, BackendOptions, BackendPlan, BackendSpec, BranchResult
from .tokenizer import tokenizer_name

SPECS: Registry[BackendSpec] = Registry("backend", base=BackendSpec)  # name → its spec, imported when asked
SPECS.lazy("hf", "openjev_batch.backends.hf.spec:SPEC")
SPECS.lazy("sglang", "openjev_batch.backends.sglang.spec:SPEC")
NAMES = SPECS.names()
assert set(NAMES) == set(BACKENDS), "config.BACKENDS (the --backend choices) must list every backend"


def default_backend() -> str:
    """`sglang` where it is installed and a GPU is present, else `hf` (sglang on a CPU needs a CPU build of
    sgl-kernel that PyPI does not ship; the tests use a shim, users pass `--backend sglang` explicitly)."""
    from .sglang import installed  # lazy: the package resolves its backend lazily

    if not installed():
        return "hf"
    import torch

    return "sglang" if torch.cuda.is_available() else "hf"


def refuse_unguarded_main() -> None:
    """In a process that multiprocessing's spawn is bootstrapping (a script wrapping the CLI without a main
    guard, re-run by an engine's spawn), exit before anything starts: sglang's guard (sglang/signals.py), asked
    here so that the CLI names no backend."""
    from .sglang.signals import refuse_unguarded_main as guard  # lazy: keeps --help fast (imports no sglang)

    guard()


def load_backend(name: str, opts: BackendOptions, kind: str = "label-logprobs") -> Backend:
    """Import and start backend `name` for readout `kind`, configured with `opts`' request options. Raises
    BackendError for an unknown or uninstalled backend, and what the backend raises when its model cannot
    load; ConfigError for request options the started engine cannot serve."""
    if name not in SPECS or kind not in SPECS[name].kinds:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(SPECS)}")

    check_model_trust(opts)  # before any engine or loader sees the checkpoint
    if kind == "label-logprobs":
        _refuse_classifier(opts.model)
    module, cls = SPECS[name].kinds[kind].split(":")
    try:
        backend = getattr(importlib.import_module(module), cls)(opts)
    except BackendError as e:
        from ..packaged_models import model_hint  # lazy: keeps --help fast (`python -m` loads backends/)

        if str(e).startswith("cannot load model") and (hint := model_hint(opts.model)):
            raise BackendError(f"{e}{hint}") from e.__cause__
        raise
    try:
        backend.configure(opts)  # the request options (request_pattern, …) a run may change again
    except BaseException:
        backend.close()
        raise
    return backend


def _refuse_classifier(model: str) -> None:
    """Label logprobs need a language-model head: a sequence classifier loaded as a causal LM gets a randomly
    initialised `lm_head` (transformers only reports it as "newly initialized"), so `run` answered at random,
    differently each time (hostile trial). Raises BackendError naming `classify`; a config that cannot be
    read is left to the loader."""
    from ..checkpoint.info import load_config  # lazy: keeps --help fast (`python -m` loads backends/)

    try:
        cfg = load_config(model) or {}
    except (OSError, ValueError):  # unreadable: the loader's own message says why
        return
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    if archs and all(a.endswith("ForSequenceClassification") for a in archs):
        raise BackendError(
            f"{model} is a sequence classifier ({', '.join(archs)}), with a score head and no language-model "
            "head to read label logprobs from: run it with `openjev-batch classify`"
        )


__all__ = [
    "SPECS", "Backend", "BackendOptions", "BackendPlan", "BackendSpec", "BranchResult", "NAMES", "default_backend",
    "load_backend", "refuse_unguarded_main", "tokenizer_name",
]  # fmt: skip
