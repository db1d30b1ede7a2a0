"""Backends, chosen by name and imported lazily: the `hf` path never imports sglang (or CUDA)."""

from __future__ import annotations

import importlib
import importlib.util

from ..errors import BackendError
from .base import Backend, BackendOptions, BranchResult

_BACKENDS = {
    "hf": "openjev_batch.backends.hf:HFBackend",
    "sglang": "openjev_batch.backends.sglang:SGLangBackend",
}
NAMES = tuple(_BACKENDS)


def default_backend() -> str:
    """`sglang` where it is installed and a GPU is present, else `hf` (sglang on a CPU needs a CPU build of
    sgl-kernel that PyPI does not ship; the tests use a shim, users pass `--backend sglang` explicitly)."""
    if importlib.util.find_spec("sglang") is None:
        return "hf"
    import torch

    return "sglang" if torch.cuda.is_available() else "hf"


def load_backend(name: str, opts: BackendOptions) -> Backend:
    """Import and start the backend `name`. Raises BackendError for an unknown or uninstalled backend."""
    if name not in _BACKENDS:
        raise BackendError(f"unknown backend {name!r}; expected one of {', '.join(NAMES)}")
    from ..models import check_model_trust

    check_model_trust(opts)  # before any engine or loader sees the checkpoint
    module, cls = _BACKENDS[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)(opts)
    except BackendError as e:
        from ..models import model_hint

        if str(e).startswith("cannot load model") and (hint := model_hint(opts.model)):
            raise BackendError(f"{e}{hint}") from e.__cause__
        raise


__all__ = ["Backend", "BackendOptions", "BranchResult", "NAMES", "default_backend", "load_backend"]
