"""What both transformers backends do alike: the device and dtype a job runs in, and loading the tokenizer
and the model through transformers' Auto classes with the checkpoint-trust options (no pickle weights, no
checkpoint code unless asked)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from ...checkpoint.trust import loader_options, trust_hint
from ...errors import OUT_OF_MEMORY, BackendError, out_of_memory
from ..base import BackendOptions
from ..tokenizer import faithful

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def device_and_dtype(opts: BackendOptions) -> tuple[str, torch.dtype]:
    """`auto` resolved: cuda when there is one, float32 on the CPU and bfloat16 on a GPU.
    Raises BackendError for an unknown device or dtype, or cuda without a GPU."""
    device = opts.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)  # `--device tpu` raised torch's RuntimeError as a traceback
    except RuntimeError:
        raise BackendError(f"unknown device {device!r}; expected auto, cpu or cuda (cuda:N)") from None
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"--device {device}: no CUDA GPU is available here (use cpu or auto)")
    dtype = opts.dtype if opts.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16")
    if dtype not in _DTYPES:
        raise BackendError(f"unknown dtype {dtype!r}; expected auto or one of {', '.join(_DTYPES)}")
    return device, _DTYPES[dtype]


def load_pretrained(auto_model: Any, opts: BackendOptions, dtype: torch.dtype, what: str) -> tuple[Any, Any]:
    """(tokenizer, model) of `opts.model` through `auto_model` (e.g. AutoModelForCausalLM). Raises
    BackendError naming `what` failed to load, and the option that would allow a refused checkpoint."""
    from transformers import AutoTokenizer

    try:
        tok_options = loader_options(opts, weights=False)
        tokenizer = faithful(AutoTokenizer.from_pretrained(opts.model, **tok_options), opts.model, **tok_options)
        with _no_loading_bar():
            model = auto_model.from_pretrained(opts.model, dtype=dtype, **loader_options(opts))
    except BackendError:  # the tokenizer check's own refusal
        raise
    except Exception as e:
        if out_of_memory(e):  # MemoryError's text is empty; mmap's blames no one
            raise BackendError(f"cannot load {what} {opts.model!r}: {OUT_OF_MEMORY}") from e
        raise BackendError(
            f"cannot load {what} {opts.model!r} with transformers: {e}{trust_hint(opts, e)}"
        ) from e
    return tokenizer, model


@contextlib.contextmanager
def _no_loading_bar():
    """transformers' own tqdm bars (`Loading weights`) off while a model loads: drawn above the product's
    bar, they were the first thing a run showed (issue 26). The hub's download bars are its own and stay.
    `TRANSFORMERS_VERBOSITY=info` (or debug), transformers' own switch for more output, keeps them."""
    from transformers.utils import logging as hf_logging

    verbose = os.environ.get("TRANSFORMERS_VERBOSITY", "").lower() in ("info", "debug")
    if verbose or not hasattr(hf_logging, "set_tqdm_hook"):
        yield
        return
    previous = hf_logging.set_tqdm_hook(lambda factory, args, kwargs: hf_logging.EmptyTqdm(*args, **kwargs))
    try:
        yield
    finally:
        hf_logging.set_tqdm_hook(previous)
