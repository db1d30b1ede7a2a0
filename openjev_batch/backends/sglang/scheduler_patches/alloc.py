"""The `alloc` patch: a hybrid engine's state-slot mapping written without blocking the host.

The state-slot allocation (`alloc`): a hybrid (recurrent-state) engine allocates a state slot for every new
request in `HybridReqToTokenPool.alloc` (0.5.17 `mem_cache/memory_pool.py:1336`) and records it with
`req_index_to_mamba_index_mapping[select_index] = …`, where `select_index` is a Python list: torch turns it
into a pageable host tensor whose copy to the GPU blocks the host until the scheduler's stream has run, and
that stream waits on the forward just launched (the scheduler's WAR barrier). So the scheduler cannot build
batch k+1 while batch k runs; under multi-item scoring every request is new, so every batch pays it. py-spy on
the H100 (issue 38, W3 on the 35B-A3B shape): 14 % of the scheduler's samples on that line. The patch makes
that one index a pinned tensor copied without blocking, on the same stream (same order, same values); the rest
of sglang's `alloc` runs unchanged.
"""

from __future__ import annotations

from typing import Any

from . import wrap_method


class _PinnedIndex:
    """A view of a CUDA tensor whose `t[list] = value` sends the index from pinned memory without blocking
    (torch's own path copies a pageable host tensor, which waits for the stream). Reads and every other index
    go to the tensor itself."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any):
        self.tensor = tensor

    def __setitem__(self, index: Any, value: Any) -> None:
        import torch

        t = self.tensor
        if isinstance(index, list) and t.is_cuda:
            index = torch.tensor(index, dtype=torch.int64, pin_memory=True).to(t.device, non_blocking=True)
        t[index] = value

    def __getitem__(self, index: Any) -> Any:
        return self.tensor[index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tensor, name)


ALLOC_MAPPINGS = ("req_index_to_mamba_index_mapping", "req_index_to_mamba_ping_pong_track_buffer_mapping")


def alloc_target():
    """sglang's `HybridReqToTokenPool` where the allocation patch fits (an `alloc` method; the mapping tensors
    are instance attributes set at init), else None. Changes nothing."""
    import importlib

    try:
        mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    except ImportError:
        return None
    cls = getattr(mp, "HybridReqToTokenPool", None)
    return cls if callable(getattr(cls, "alloc", None)) else None


def apply_alloc() -> bool:
    """Wrap sglang's `HybridReqToTokenPool.alloc` so that its slot-mapping writes do not block the host
    (`_PinnedIndex`). Returns False (and changes nothing) where sglang has no such class or method."""
    cls = alloc_target()
    if cls is None:
        return False

    def make(stock: Any) -> Any:
        def alloc(self: Any, *args: Any, **kwargs: Any) -> Any:
            own = self.__dict__
            swapped = {n: own[n] for n in ALLOC_MAPPINGS if getattr(own.get(n), "is_cuda", False)}
            for n, t in swapped.items():
                own[n] = _PinnedIndex(t)
            try:
                return stock(self, *args, **kwargs)
            finally:
                own.update(swapped)

        return alloc

    return wrap_method(cls, "alloc", "_openjev_alloc", make)
