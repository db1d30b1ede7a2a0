"""Multi-item scoring packing and readout (backends/sglang/mis.py): pure, plus the packed request run through
the tiny Qwen3 with sglang's multi-item mask and positions (the CPU engine has no flashinfer, so this is the
CI check of the request layout; GPU parity is measured on the H200, docs/benchmarks.md)."""

import math

import pytest
import torch
from token_rows import full_forward, make_rows

from openjev_batch.backends.sglang import fork_releases, mis
from openjev_batch.backends.sglang.mis import (
    DELIMITER_ID,
    MAX_ITEM_TOKENS,
    build,
    exactness,
    pack_tokens,
    pack_window,
    read_pack,
    union_labels,
)
from openjev_batch.core import BranchSpec, RowPrompt, Window
from openjev_batch.pipeline.plan import plan


def row(pos, prefix, suffixes, labels=None):
    labels = labels or [(10, 11, 12)] * len(suffixes)
    return RowPrompt(
        pos,
        f"r{pos}",
        tuple(prefix),
        tuple(
            BranchSpec(f"q{j}", tuple(s), tuple(lab))
            for j, (s, lab) in enumerate(zip(suffixes, labels, strict=True))
        ),
    )


def window(rows):
    return Window(tuple(rows), tuple(len(r.prefix) for r in rows))


def test_build_delimiter_indices():
    ids, delims = build([1, 2, 3], [[4, 5], [6], [7, 8, 9]], delimiter_id=0)
    assert ids == (1, 2, 3, 0, 4, 5, 0, 6, 0, 7, 8, 9, 0)
    assert delims == (3, 6, 8, 12)
    assert all(ids[d] == 0 for d in delims)
    assert len(ids) == pack_tokens(3, [2, 1, 3])
    # the row before delimiter k+1 is item k's last token; the row before delimiter 0 is the prefix's last
    assert [ids[d - 1] for d in delims] == [3, 5, 6, 9]


def test_union_labels_first_seen_order():
    assert union_labels([(5, 6), (6, 7, 5), (9,)]) == (5, 6, 7, 9)


def test_rows_sharing_a_prefix_share_packs_within_budget():
    p = list(range(100, 120))  # 20 tokens
    rows = [row(i, p, [[1] * 5]) for i in range(10)] + [row(10, [7] * 8, [[2] * 3, [3] * 4])]
    budget = pack_tokens(20, [5] * 4)  # exactly four items behind one prefix
    packs = pack_window(window(rows), budget)
    assert [len(pk.items) for pk in packs] == [4, 4, 2, 2]
    assert all(pk.n_tokens <= budget for pk in packs)
    assert packs[0].items == ((0, 0), (1, 0), (2, 0), (3, 0))
    assert packs[3].items == ((10, 0), (10, 1)) and packs[3].prefix_len == 8
    # every branch exactly once, in window order
    flat = [it for pk in packs for it in pk.items]
    assert flat == [(i, j) for i, r in enumerate(rows) for j in range(len(r.branches))]
    for pk in packs:
        assert pk.input_ids[: pk.prefix_len] == rows[pk.items[0][0]].prefix
        assert len(pk.delimiters) == len(pk.items) + 1


def test_one_row_many_questions_and_a_branch_over_budget():
    rows = [row(0, [1] * 10, [[2] * 3] * 8), row(1, [4] * 10, [[5] * 50])]
    packs = pack_window(window(rows), budget=pack_tokens(10, [3] * 8))
    assert [len(pk.items) for pk in packs] == [8, 1]  # a whole row in one request
    packs = pack_window(window(rows), budget=30)  # 10 + 1 + 4k ≤ 30: four items a pack
    assert [len(pk.items) for pk in packs] == [4, 4, 1]
    assert packs[2].n_tokens > 30  # alone, never dropped
    with pytest.raises(ValueError, match="budget"):
        pack_window(window(rows), 0)
    with pytest.raises(ValueError, match="questions.q0"):
        pack_window(window([row(0, [1], [[2] * (MAX_ITEM_TOKENS + 1)])]), 1 << 20)


def test_labels_union_per_pack_and_read_back_by_id():
    rows = [row(0, [1, 2], [[3], [4], [5]], labels=[(10, 11), (12, 11, 13), (10,)])]
    (pk,) = pack_window(window(rows), 100)
    assert pk.label_ids == (10, 11, 12, 13)

    def lp(entry, tok):  # a distinct value per (entry, token) so any shift between items shows
        return -(entry * 10 + (tok - 9)) / 7

    # sglang's shape: N+1 entries of (logprob, token_id, text), in any token order
    meta = {
        "input_token_ids_logprobs": [
            [(lp(e, t), t, None) for t in reversed(pk.label_ids)] for e in range(len(pk.items) + 1)
        ]
    }
    labels = [rows[0].branches[j].label_ids for _, j in pk.items]
    got = read_pack(meta, pk, labels)
    for k, ((vals, err), ids) in enumerate(zip(got, labels, strict=True)):
        assert err is None
        assert vals == tuple(lp(k + 1, t) for t in ids)  # entry 0 is the prefix alone, never an item


def test_read_pack_missing_and_wrong_count():
    (pk,) = pack_window(window([row(0, [1], [[2], [3]], labels=[(10, 11), (10, 11)])]), 100)
    meta = {"input_token_ids_logprobs": [None, [(-1.0, 10, None)], [(-2.0, 10, None), (math.inf, 11, None)]]}
    (v0, e0), (v1, e1) = read_pack(meta, pk, [(10, 11), (10, 11)])
    assert v0[0] == -1.0 and math.isnan(v0[1]) and "11" in e0
    assert v1[0] == -2.0 and math.isnan(v1[1]) and "11" in e1
    bad = read_pack({"input_token_ids_logprobs": meta["input_token_ids_logprobs"][:2]}, pk, [(10,), (11,)])
    assert all(math.isnan(v[0]) and "2 multi-item logprob entries for 2 items" in e for v, e in bad)


def test_exactness():
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "use_sliding_window": False, "sliding_window": 4096}
    assert exactness(qwen3) is None
    assert exactness({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "llama3"}}) is None
    assert "sliding" in exactness({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": True})
    assert "sliding" in exactness({"architectures": ["LlamaForCausalLM"], "sliding_window": 4096})
    # the Qwen3.5/3.6 hybrids (GDN + M-RoPE) are exact only through the product's state fork, on its sglang
    for arch in ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"):
        for release in fork_releases.FORK_SGLANG:  # every release the extra installs
            assert exactness({"architectures": [arch]}, release) is None
        assert mis.needs_fork({"architectures": [arch]})
        for outside in ("0.5.16", "0.5.24"):
            assert "0.5.17-0.5.23" in exactness({"architectures": [arch]}, outside)
    assert not mis.needs_fork(qwen3)
    assert "not a 1-D RoPE" in exactness({"architectures": ["Qwen3NextForCausalLM"]})  # another hybrid: no fork
    assert "not a 1-D RoPE" in exactness({"architectures": ["MistralForCausalLM"]})
    assert "not a 1-D RoPE" in exactness({})
    mixed = {"architectures": ["Qwen3ForCausalLM"], "layer_types": ["full_attention", "sliding_attention"]}
    assert "layer types" in exactness(mixed)
    mrope = {"architectures": ["Qwen2ForCausalLM"], "rope_scaling": {"type": "mrope", "mrope_section": [1]}}
    assert "mrope" in exactness(mrope).lower()


def test_exactness_of_the_tiny_qwen3_config(tiny_model):
    from transformers import AutoConfig

    assert exactness(AutoConfig.from_pretrained(tiny_model)) is None


def mis_forward(model, pk):
    """The packed request through a transformers model with sglang's multi-item attention: a token of item k
    sees the prefix and the tokens of its own item up to itself (never a delimiter or another item); item
    positions restart at the prefix length (flashinfer_backend._process_multi_item_scoring). Returns the
    log-softmax rows before each delimiter."""
    n, p = pk.n_tokens, pk.prefix_len
    item_start = [0] * n  # for suffix tokens: index of their delimiter
    pos = list(range(n))
    d_iter = list(pk.delimiters)
    for k, d in enumerate(d_iter):
        end = d_iter[k + 1] if k + 1 < len(d_iter) else n
        for t in range(d, end):
            item_start[t] = d
            pos[t] = p + (t - d) - 1
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for kv in range(q + 1):
            allowed[q, kv] = kv < p if q >= p else True
            if q >= p and kv > item_start[q]:
                allowed[q, kv] = True
    mask = torch.zeros(1, 1, n, n).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        logits = model(
            torch.tensor([pk.input_ids]), attention_mask=mask, position_ids=torch.tensor([pos])
        ).logits[0]
    return torch.log_softmax(logits.float(), -1)[[d - 1 for d in pk.delimiters]]


def test_packed_request_equals_separate_requests_on_the_tiny_qwen3(hf_backend):
    """The pack's layout + sglang's multi-item semantics give each item its own request's label logprobs."""
    model = hf_backend.model
    rows = make_rows(n_rows=3, n_q=3, shared=(500, 501, 502))
    rows += [RowPrompt(9, "dup", rows[0].prefix, rows[1].branches)]  # same prefix as row 0: one pack
    (w,) = plan(rows, 100_000)
    packs = pack_window(w, budget=10_000, delimiter_id=DELIMITER_ID)
    assert len(packs) == 3 and max(len(pk.items) for pk in packs) == 6
    worst = 0.0
    for pk in packs:
        lp = mis_forward(model, pk)
        labels = [w.rows[i].branches[j].label_ids for i, j in pk.items]
        meta = {
            "input_token_ids_logprobs": [
                [(lp[e, t].item(), t, None) for t in pk.label_ids] for e in range(len(pk.items) + 1)
            ]
        }
        for (i, j), (vals, err) in zip(pk.items, read_pack(meta, pk, labels), strict=True):
            r, b = w.rows[i], w.rows[i].branches[j]
            ref = full_forward(model, list(r.prefix + b.suffix), b.label_ids)
            assert err is None
            worst = max(worst, max(abs(a - c) for a, c in zip(vals, ref, strict=True)))
    assert worst <= 1e-4


# --- the gated-delta-net fork plan (backends/sglang/hybrid): pure, so tested here; the kernels need a GPU ---


def test_fork_segments_leave_every_delimiter_out_and_keep_request_order():
    prefix, items = [11, 12, 13], [[21], [31, 32], [41, 42, 43]]
    ids, delims = mis.build(prefix, items)  # 3 + (1+1) + (1+2) + (1+3) + 1 = 13 tokens, delimiters at 3, 5, 8, 12
    ids2, delims2 = mis.build([7], [[8, 9]])  # a second request: 1 + 3 + 1 = 5 tokens
    seg = mis.fork_segments([len(ids), len(ids2)], [delims, delims2])
    flat = list(ids) + list(ids2)
    assert [flat[r] for r in seg.prefix_rows] == [11, 12, 13, 7]
    assert seg.prefix_lens == [3, 1] and seg.prefix_cu == [0, 3, 4]
    assert [flat[r] for r in seg.item_rows] == [21, 31, 32, 41, 42, 43, 8, 9]
    assert seg.item_lens == [1, 2, 3, 2] and seg.item_cu == [0, 1, 3, 6, 8]
    assert seg.item_req == [0, 0, 0, 1]
    assert mis.DELIMITER_ID not in [flat[r] for r in seg.prefix_rows + seg.item_rows]


def test_fork_segments_keep_delimiter_control_starts_each_item_at_its_delimiter():
    ids, delims = mis.build([1, 2], [[3], [4, 5]])
    seg = mis.fork_segments([len(ids)], [delims], keep_delimiter=True)
    assert [ids[r] for r in seg.item_rows] == [mis.DELIMITER_ID, 3, mis.DELIMITER_ID, 4, 5]
    assert seg.item_lens == [2, 3]


@pytest.mark.parametrize(
    "n, delims",
    [(5, [0, 2, 4]), (6, [2, 3, 5]), (6, [2, 4, 4]), (6, [2, 4]), (7, [2, 4, 5]), (3, [2])],
    ids=["empty-prefix", "empty-item", "not-increasing", "last-not-at-end", "last-not-at-end-2", "no-item"],
)
def test_fork_segments_refuse_delimiters_a_fork_cannot_honour(n, delims):
    with pytest.raises(ValueError):
        mis.fork_segments([n], [delims])
