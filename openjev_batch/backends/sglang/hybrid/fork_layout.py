"""The fork's token layout (issue 47): a multi-item forward's tokens are put in fork order once, at the model's
input: every request's prefix first (request order), then every item (request, then item order), then the
delimiters. Each gated-delta-net layer then hands sglang's kernels contiguous segments as views of its own
inputs (`fork_layer`): pass A over rows [0, Tp), pass B over [Tp, Tp + Ti). The packed order comes back once at the
model's output, and around each full-attention layer, whose kernels read the requests packed (`to_packed`,
`to_fork`).

Why: the first fork gathered `mixed_qkv[rows]`, `a[rows]`, `b[rows]` and scattered `out[0, rows]` in every GDN layer
and pass: ~250 index kernels a step, 7.6 % of the H200's GPU time in the 2026-12-05 timeline. In fork order the 30
GDN layers copy no token rows (one `cat` of their two outputs); the 10 attention layers gather two 2048-wide rows
a token each. Pure torch, no sglang: the CPU tests run it (tests/backends/test_hybrid_fork_layout.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..mis import ForkSegments

# one GDN pass: (mixed_qkv (n, D), a (n, HV), b (n, HV)) → core output (1, n, HV, V)
Pass = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def fork_order(seg: ForkSegments, total: int) -> list[int]:
    """Packed row of each fork-order position: prefix rows, item rows, then the rows in neither (delimiters)
    ascending. A permutation of range(total). The definition, in plain Python (`Layout.build` computes it
    vectorised; the tests hold the two equal)."""
    used = set(seg.prefix_rows) | set(seg.item_rows)
    return [*seg.prefix_rows, *seg.item_rows, *(r for r in range(total) if r not in used)]


@dataclass
class Layout:
    """One forward's fork order on the device. `order[i]` is the packed row at fork position i, `inverse[j]` the
    fork position of packed row j; `tp`, `ti`, `td` count prefix, item and delimiter rows."""

    order: torch.Tensor  # (T,) int64
    inverse: torch.Tensor  # (T,) int64
    tp: int
    ti: int
    td: int

    @classmethod
    def build(
        cls, lens: list[int], delims: list[torch.Tensor], device: torch.device, keep_delimiter: bool = False
    ) -> Layout:
        """From the requests' token counts and their delimiter indices (CPU int tensors, as sglang holds them;
        validated by `mis.fork_segments` first). Vectorised: a Python loop over a 27k-token forward cost ~20 ms of
        host time before its first kernel (issue 47's idle gaps); this is a stable sort of one key a token (~1 ms)."""
        # numpy, single-threaded: torch's threaded CPU kernels (repeat_interleave, index_put) took 30-50 ms each
        # here on a busy host
        T = sum(lens)
        n = np.asarray(lens, dtype=np.int64)  # (R,)
        starts = np.cumsum(n) - n  # (R,) first packed row of each request
        nd = np.asarray([len(d) for d in delims], dtype=np.int64)  # (R,) delimiters a request
        rows_d = np.concatenate([d.numpy() for d in delims]).astype(np.int64) + np.repeat(starts, nd)  # (M+R,)
        first_d = np.cumsum(nd) - nd  # (R,) index of each request's first delimiter in rows_d
        key = np.ones(T, dtype=np.int8)  # (T,) 0 prefix, 1 item, 2 neither
        key[rows_d if not keep_delimiter else rows_d[first_d + nd - 1]] = 2
        key[np.arange(T) < np.repeat(rows_d[first_d], n)] = 0  # before the request's first delimiter: its prefix
        order_np = np.argsort(key, kind="stable")  # (T,) prefix rows, item rows, the rest; packed order in each
        counts = np.bincount(key, minlength=3).tolist()
        order = torch.from_numpy(order_np)
        inverse = torch.from_numpy(np.argsort(order_np))  # (T,) a permutation's inverse

        def dev(t: torch.Tensor) -> torch.Tensor:
            return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)

        return cls(dev(order), dev(inverse), counts[0], counts[1], counts[2])

    def to_fork(self, x: torch.Tensor) -> torch.Tensor:
        """(T, …) packed → (T, …) fork order (one gather)."""
        return x.index_select(0, self.order)

    def to_packed(self, x: torch.Tensor) -> torch.Tensor:
        """(T, …) fork order → (T, …) packed (one gather)."""
        return x.index_select(0, self.inverse)


def fork_layer(
    mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, lay: Layout, prefixes: Pass, items: Pass
) -> torch.Tensor:
    """One GDN layer's core in fork order. mixed_qkv (T, D), a and b (T, HV), all in fork order. `prefixes` runs
    pass A (each request's prefix from its zeroed slot, leaving the prefix-end state there), then `items` runs
    pass B (each item from a copy of its request's prefix-end state): both on views, no token row is copied.
    Returns (1, T, HV, V) in fork order; delimiter rows are 0 (no recurrence reads them, attention masks them)."""
    p, i = lay.tp, lay.tp + lay.ti
    out_a = prefixes(mixed_qkv[:p], a[:p], b[:p])  # (1, Tp, HV, V)
    parts = [out_a[0]]
    if lay.ti:
        parts.append(items(mixed_qkv[p:i], a[p:i], b[p:i])[0])  # (Ti, HV, V)
    if lay.td:
        parts.append(out_a.new_zeros((lay.td, *out_a.shape[2:])))  # (Td, HV, V)
    return torch.cat(parts).unsqueeze(0)  # (1, T, HV, V)
