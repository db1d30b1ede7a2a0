"""The fork order of the Qwen3.5/3.6 multi-item fork (backends/sglang/hybrid/fork_layout.py, issue 47): a
recurrence run in fork order (prefixes, then items, then delimiters; two passes on views) gives each item exactly
what the item gives run from its own request's prefix-end state, in float64 on the CPU; the per-layer path copies
no token row (no index, gather or scatter op reaches torch, and each pass gets a view of the layer's own input);
the real GDN layer in qwen3_5_mis.py subscripts none of its inputs by rows. The sglang kernels need a GPU
(benchmarks/hybrid_mis_exact_gpu.py)."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from openjev_batch.backends.sglang import mis
from openjev_batch.backends.sglang.hybrid.fork_layout import Layout, fork_layer, fork_order

GATHERS = ("index", "gather", "scatter", "take", "masked_select", "nonzero")  # aten names of row copies


class OpLog(TorchDispatchMode):
    """Records every aten op dispatched inside the block."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


def batch():
    """Two requests (prefix + 3 items, prefix + 1 item), packed as sglang packs them: (ids, seg, T, layout)."""
    ids, d = mis.build([11, 12, 13, 14, 15], [[21, 22], [31], [41, 42, 43]])  # 5 + 3 + 2 + 4 + 1 = 15 tokens
    ids2, d2 = mis.build([7, 8], [[9, 10, 11]])  # 2 + 4 + 1 = 7 tokens
    lens = [len(ids), len(ids2)]
    seg = mis.fork_segments(lens, [d, d2])
    lay = Layout.build(lens, [torch.tensor(d), torch.tensor(d2)], torch.device("cpu"))
    return list(ids) + list(ids2), seg, sum(lens), lay


def scan(x, a, state):
    """A toy gated recurrence over one segment: h ← h·sigmoid(a) + x, out = h. x, a (n, D); state (D,) updated."""
    out = torch.empty_like(x)
    for t in range(x.shape[0]):
        state.mul_(torch.sigmoid(a[t])).add_(x[t])
        out[t] = state
    return out


def run_segments(x, a, cu, states):
    """Varlen pass: segment s = rows [cu[s], cu[s+1]) from states[s] (updated in place) → (1, n, D)."""
    return torch.cat([scan(x[cu[s] : cu[s + 1]], a[cu[s] : cu[s + 1]], states[s]) for s in range(len(cu) - 1)])[None]


def test_fork_order_puts_prefixes_then_items_then_delimiters_and_is_a_permutation():
    ids, seg, T, lay = batch()
    order = fork_order(seg, T)
    assert sorted(order) == list(range(T))
    toks = [ids[r] for r in order]
    assert toks[: len(seg.prefix_rows)] == [11, 12, 13, 14, 15, 7, 8]
    assert toks[len(seg.prefix_rows) : len(seg.prefix_rows) + len(seg.item_rows)] == [21, 22, 31, 41, 42, 43, 9, 10, 11]
    assert set(toks[len(seg.prefix_rows) + len(seg.item_rows) :]) == {mis.DELIMITER_ID}
    assert lay.order.tolist() == order
    x = torch.randn(T, 3, dtype=torch.float64)
    assert torch.equal(lay.to_packed(lay.to_fork(x)), x)
    assert (lay.tp, lay.ti, lay.td) == (7, 9, 6)


@pytest.mark.parametrize("keep_delimiter", [False, True])
def test_the_vectorised_layout_is_the_fork_order_on_random_batches(keep_delimiter):
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        lens, delims = [], []
        for _ in range(int(torch.randint(1, 6, (1,), generator=g))):
            prefix = [1] * int(torch.randint(1, 70, (1,), generator=g))
            items = [[2] * int(torch.randint(1, 66, (1,), generator=g)) for _ in range(int(torch.randint(1, 8, (1,), generator=g)))]
            ids, d = mis.build(prefix, items)
            lens.append(len(ids))
            delims.append(torch.tensor(d))
        seg = mis.fork_segments(lens, [d.tolist() for d in delims], keep_delimiter=keep_delimiter)
        lay = Layout.build(lens, delims, torch.device("cpu"), keep_delimiter=keep_delimiter)
        assert lay.order.tolist() == fork_order(seg, sum(lens))
        assert (lay.tp, lay.ti) == (len(seg.prefix_rows), len(seg.item_rows))
        assert torch.equal(lay.order[lay.inverse], torch.arange(sum(lens)))


def test_items_in_fork_order_equal_each_item_run_from_its_own_prefix_end_state():
    ids, seg, T, lay = batch()
    g = torch.Generator().manual_seed(0)
    D = 4
    x = torch.randn(T, D, generator=g, dtype=torch.float64)  # packed, as the model's input
    a = torch.randn(T, D, generator=g, dtype=torch.float64)
    slots = torch.zeros(len(seg.prefix_lens), D, dtype=torch.float64)  # the requests' zeroed state slots

    def prefixes(x_, a_, b_):
        return run_segments(x_, a_, seg.prefix_cu, slots)

    def items(x_, a_, b_):
        copies = slots[torch.tensor(seg.item_req)].clone()  # (M, D): each item from its request's prefix end
        return run_segments(x_, a_, seg.item_cu, copies)

    out = lay.to_packed(fork_layer(lay.to_fork(x), lay.to_fork(a), lay.to_fork(a), lay, prefixes, items)[0])
    # the reference: per request, the prefix from zero, then each item alone from a copy of the prefix-end state
    start, k = 0, 0
    for r, n in enumerate(seg.prefix_lens):
        s = torch.zeros(D, dtype=torch.float64)
        assert torch.equal(out[seg.prefix_rows[start : start + n]], scan(x[seg.prefix_rows[start : start + n]],
                           a[seg.prefix_rows[start : start + n]], s))  # fmt: skip
        start += n
        while k < len(seg.item_req) and seg.item_req[k] == r:
            rows = seg.item_rows[seg.item_cu[k] : seg.item_cu[k + 1]]
            assert torch.equal(out[rows], scan(x[rows], a[rows], s.clone())), (r, k)
            k += 1
    delims = [i for i, t in enumerate(ids) if t == mis.DELIMITER_ID]
    assert torch.count_nonzero(out[delims]) == 0


def test_the_per_layer_path_copies_no_token_row():
    _, seg, T, lay = batch()
    qkv, a, b = torch.randn(T, 8), torch.randn(T, 2), torch.randn(T, 2)  # fork order, as the layer gets them
    seen = []

    def pass_(x, a_, b_):  # what sglang's kernels would get: views into the layer's own tensors
        seen.append(all(t.untyped_storage().data_ptr() == o.untyped_storage().data_ptr()
                        for t, o in ((x, qkv), (a_, a), (b_, b))))  # fmt: skip
        return torch.ones(1, x.shape[0], 2, 3)

    with OpLog() as log:
        out = fork_layer(qkv, a, b, lay, pass_, pass_)
    assert seen == [True, True]
    assert out.shape == (1, T, 2, 3)
    assert not [op for op in log.ops if any(g in op for g in GATHERS)], log.ops
    # the check itself catches the first fork's way (mixed_qkv[rows], out[0, rows] = …)
    with OpLog() as log:
        rows = torch.tensor(seg.item_rows)
        z = torch.zeros(1, T, 2)
        z[0, rows] = a[rows]
    assert [op for op in log.ops if any(g in op for g in GATHERS)]


def test_the_real_gdn_layer_subscripts_no_input_by_rows():
    """ForkingLinearAttention.forward (qwen3_5_mis.py, under the CI's sglang) hands its inputs to fork_layer whole:
    no `mixed_qkv[…]`, `a[…]`, `b[…]` and no subscripted assignment into an output."""
    pytest.importorskip("sglang.srt")
    from openjev_batch.backends.sglang.hybrid import qwen3_5_mis as fork

    tree = ast.parse(textwrap.dedent(inspect.getsource(fork.ForkingLinearAttention.forward)))
    subs = [ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in ("mixed_qkv", "a", "b")]  # fmt: skip
    assert subs == []
    calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    assert "fork_layer" in calls
