"""Readouts: what a row asks and how its answer is read (base.py has the protocol). The registry below is the
one place that names them; each readout's module builds it from a job's options (`build(cfg, labels, …)`).

- `label-logprobs` (label_logprobs/): questions answered from option-label next-token logprobs (`run`).
- `classifier-head` (classifier_head/): a sequence-classification head's logits (`classify`).

Adding a readout: its module (a `Readout` subclass, `BASE_COLUMNS`, `INPUT_COLUMNS`, `TEXT_COLUMN`, `OPTIONS`,
`COMMAND`, a `build` function), one `register` line here, and a backend class per backend for its
`backend_kind` (backends/__init__.py).
"""

from __future__ import annotations

import importlib
from typing import Any

_REGISTRY: dict[str, str] = {}


def register(name: str, module: str) -> None:
    """Register readout `name`, built by `module`'s `build` (imported only when that readout is used)."""
    _REGISTRY[name] = module


# the readouts' names: everything else refers to them through these two constants
LABEL_LOGPROBS, CLASSIFIER_HEAD = "label-logprobs", "classifier-head"
register(LABEL_LOGPROBS, ".label_logprobs")
register(CLASSIFIER_HEAD, ".classifier_head")

NAMES = tuple(_REGISTRY)


def _module(name: str):
    from ..errors import ConfigError

    if name not in _REGISTRY:
        raise ConfigError(f"unknown readout {name!r}; expected one of {', '.join(NAMES)}")
    return importlib.import_module(_REGISTRY[name], __name__)


def build(name: str, cfg: Any, labels: tuple[str, ...] | None = None, **options: Any):
    """Readout `name` for a job. `cfg`: the job's options (a RunConfig: keep, questions_file, template,
    system_prompt, model); `labels`: a started backend's (classifier-head; else read from the checkpoint
    when `cfg.model` is set); `options`: what the Python API passes as values instead of files (`questions`:
    a parsed question map). Raises ConfigError / BackendError (a checkpoint that is no classifier)."""
    return _module(name).build(cfg, labels, **options)


def base_columns(name: str) -> tuple[str, ...]:
    """The output columns a readout always writes (a kept input column must not reuse one)."""
    return tuple(_module(name).BASE_COLUMNS)


def input_columns(name: str) -> tuple[str, ...]:
    """The input columns a readout reads (the Python API's keep="all" keeps the others)."""
    return tuple(_module(name).INPUT_COLUMNS)


def text_column(name: str) -> str:
    """The column a bare list of texts fills (the Python API: a Series or a list of strings)."""
    return _module(name).TEXT_COLUMN


def foreign_option(name: str, field: str) -> str | None:
    """Why job option `field` (a RunConfig field, set) is refused for readout `name`: it is another readout's
    (each declares the job options it reads in `OPTIONS`, field → flag, and the command that runs it in
    `COMMAND`). None when `name` reads it, or no readout declares it."""
    mine = _module(name)
    if field in mine.OPTIONS:
        return None
    for other in NAMES:
        m = _module(other)
        if field in m.OPTIONS:
            return f"{m.OPTIONS[field]} is for {m.COMMAND} ({other}), not for {mine.COMMAND} ({name})"
    return None
