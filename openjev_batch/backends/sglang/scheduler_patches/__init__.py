"""The scheduler patches, one module each: `gather` (the label-logprob gather without a GPU sync,
sgl-project/sglang#39642), `readback` (multi-item label logprobs copied to the host without blocking), `idle-check`
(the idle radix-tree check rate-limited), `alloc` (the state-slot mapping written without blocking). Each installs
only where sglang has the structure it replaces. scheduler_patch.py chooses and installs them in sglang's scheduler
process; they are imported there, so they stay light (torch only, lazily)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def wrap_method(cls: Any, name: str, marker: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace `cls.name` by `make(stock)` (wrapped: `__wrapped__` is sglang's own), once: a second call finds
    `marker` set on the method and changes nothing. Returns True (the patch is in place)."""
    stock = getattr(cls, name)
    if getattr(stock, marker, False):
        return True
    patched = functools.wraps(stock)(make(stock))
    setattr(patched, marker, True)
    setattr(cls, name, patched)
    return True
