"""Multi-item scoring (sglang `enable_mis`): packing a window's branches into requests and reading them back.

Pure: ids in, ids out; no sglang, no model. The backend (`backends/sglang/engine.py`) sends the packs.

One request = `prefix D item_1 D item_2 … D item_N D`, where item k is one branch's suffix and D a
placeholder token whose positions (the N+1 "delimiter indices") travel with the request; sglang never scans
for D, so any valid id does (sglang uses 9999). With flashinfer's multi-item mask an item token attends to
the whole prefix and to its own item only (not to D, not to other items), and its positions restart at the
prefix length (sglang 0.5.17 `layers/attention/flashinfer_backend.py` `_process_multi_item_scoring`;
flashinfer `prefill.cuh` `logits_mask_multi_item_scoring`). So the next-token distribution at the last token
of item k — the row before delimiter k+1 — is that of the separate request `prefix + item_k`, up to
floating-point order. That holds for 1-D RoPE full-attention models only (`exactness`).

sglang returns, per request, `meta_info["input_token_ids_logprobs"]`: N+1 entries (one per delimiter: entry 0
is the distribution after the prefix alone, entry k+1 the one after item k), each a list of
`(logprob, token_id, text)` for the request's one `token_ids_logprob` list. A request carries one label list,
so a pack asks for the union of its items' label ids and each item's labels are read back by id.

Packing: the branches of rows that share the same prefix (the planner makes them adjacent) go behind one
copy of it, as many as fit `budget` tokens (sglang's prefill budget, and never more than the context: with
chunked prefill off a packed request is one forward). A row's branches are never reordered; a prefix whose
branches do not fit one pack continues in the next pack, which repeats the prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core import Window
from .fork_releases import FORK_SGLANG

DELIMITER_ID = 9999  # sglang's MIS_DELIMITER_TOKEN_ID; a placeholder only (positions travel with the request)
MAX_ITEM_TOKENS = 65_535  # sglang/flashinfer keep an item's positions in uint16

# Architectures whose attention is 1-D RoPE, full attention on every layer (sglang's multi-item mask is then
# exact). Sliding-window variants are caught by the config checks below; hybrid linear-attention (GDN), mrope
# and encoder-decoder models are not listed.
EXACT_ARCHITECTURES = frozenset(
    {
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "LlamaForCausalLM",
    }
)


# The architectures the state-fork override (backends/sglang/hybrid) serves: what a config.json says → the class it
# registers under the same name. The fact stands here, beside `exactness`, which decides by it; hybrid/ imports it.
FORK_ARCHITECTURES = frozenset(
    {
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
    }
)

def exactness(config: Any, sglang_version: str | None = None) -> str | None:
    """None when multi-item scoring gives each item the logprobs of its own request (up to float order) for a
    Hugging Face model config (object or dict) on this sglang; else why not, as text. The one place that decides
    it. 1-D RoPE full-attention models are exact with sglang's own mask; the Qwen3.5/3.6 hybrids (GDN + gated
    attention, M-RoPE) only with the product's model override (backends/sglang/hybrid, `needs_fork`), on the
    sglang release it was written for."""

    def get(k: str, default=None):
        return config.get(k, default) if isinstance(config, dict) else getattr(config, k, default)

    archs = list(get("architectures") or [])
    if archs and all(a in FORK_ARCHITECTURES for a in archs):
        if sglang_version is not None and sglang_version not in FORK_SGLANG:
            return (
                f"the state fork for {archs[0]} serves sglang {FORK_SGLANG[0]}-{FORK_SGLANG[-1]}, not {sglang_version} "
                "(sglang's own multi-item scoring is not exact on these models: sgl-project/sglang#31969)"
            )
        return None
    if not archs or any(a not in EXACT_ARCHITECTURES for a in archs):
        return f"architecture {', '.join(archs) or '(none)'} is not a 1-D RoPE full-attention model"
    if get("use_sliding_window", None) is True or (
        get("use_sliding_window", None) is None and get("sliding_window", None)
    ):
        return "the model uses sliding-window attention"
    layer_types = get("layer_types", None) or []
    if any(t != "full_attention" for t in layer_types):
        return f"layer types {sorted(set(layer_types))} are not all full attention"
    rope = get("rope_scaling", None) or get("rope_parameters", None) or {}
    if isinstance(rope, dict) and ("mrope_section" in rope or rope.get("type") == "mrope"):
        return "the model uses multimodal RoPE (mrope)"
    return None


def needs_fork(config: Any) -> bool:
    """Whether multi-item scoring on this model runs through the product's state-fork override."""
    archs = config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)
    return bool(archs) and all(a in FORK_ARCHITECTURES for a in archs or ())


@dataclass(frozen=True)
class Pack:
    """One multi-item request. `items[k]` = (row index in the window, branch index) of item k;
    `delimiters` the N+1 delimiter positions in `input_ids`; `label_ids` the union of its items' labels."""

    input_ids: tuple[int, ...]
    delimiters: tuple[int, ...]
    label_ids: tuple[int, ...]
    items: tuple[tuple[int, int], ...]
    prefix_len: int

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def pack_tokens(prefix_len: int, suffix_lens: Sequence[int]) -> int:
    """Length of the request for one prefix and these items: prefix + (D + item) each + the closing D."""
    return prefix_len + sum(1 + n for n in suffix_lens) + 1


def build(
    prefix: Sequence[int], suffixes: Sequence[Sequence[int]], delimiter_id: int = DELIMITER_ID
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """`prefix D s_1 D … s_N D` and its N+1 delimiter indices (sglang's `_build_multi_item_token_sequence`)."""
    ids = list(prefix)
    delims = []
    for s in suffixes:
        delims.append(len(ids))
        ids.append(delimiter_id)
        ids.extend(s)
    delims.append(len(ids))
    ids.append(delimiter_id)
    return tuple(ids), tuple(delims)


def union_labels(label_lists: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The distinct label ids of several items, in first-seen order."""
    return tuple(dict.fromkeys(t for labels in label_lists for t in labels))


def pack_window(window: Window, budget: int, delimiter_id: int = DELIMITER_ID) -> list[Pack]:
    """The window's branches as packs, in window order: consecutive rows with the same prefix share packs
    while `pack_tokens` ≤ `budget`. A single branch larger than the budget still gets a pack of its own
    (the engine then refuses or runs it; its error lands on that branch only).
    Raises ValueError for a branch suffix of more than MAX_ITEM_TOKENS tokens or a non-positive budget."""
    if budget <= 0:
        raise ValueError("budget must be positive")
    packs: list[Pack] = []
    cur_prefix: tuple[int, ...] | None = None
    cur: list[tuple[int, int]] = []
    size = 0

    def close() -> None:
        nonlocal cur, size
        if cur:
            rows = window.rows
            suffixes = [rows[i].branches[j].suffix for i, j in cur]
            ids, delims = build(cur_prefix or (), suffixes, delimiter_id)
            labels = union_labels([rows[i].branches[j].label_ids for i, j in cur])
            packs.append(Pack(ids, delims, labels, tuple(cur), len(cur_prefix or ())))
        cur, size = [], 0

    for i, r in enumerate(window.rows):
        if r.prefix != cur_prefix:
            close()
            cur_prefix = r.prefix
        for j, b in enumerate(r.branches):
            if len(b.suffix) > MAX_ITEM_TOKENS:
                raise ValueError(
                    f"row {r.row_id}: questions.{b.qid}: {len(b.suffix)} suffix tokens, "
                    f"multi-item scoring allows {MAX_ITEM_TOKENS}"
                )
            add = 1 + len(b.suffix)
            if cur and size + add > budget:
                close()
            if not cur:
                size = len(r.prefix) + 1  # the prefix and the closing delimiter
            cur.append((i, j))
            size += add
    close()
    return packs


def read_pack(
    meta: dict[str, Any], pack: Pack, label_ids: Sequence[Sequence[int]]
) -> list[tuple[tuple[float, ...], str | None]]:
    """Each item's label logprobs (aligned with `label_ids[k]`, NaN where missing) and error text or None,
    read by token id from entry k+1 of the request's `input_token_ids_logprobs`. A response with the wrong
    number of entries marks every item of the pack (never a silent shift of answers between items)."""
    entries = meta.get("input_token_ids_logprobs") or []
    n = len(pack.items)
    if len(entries) != n + 1:
        err = f"engine returned {len(entries)} multi-item logprob entries for {n} items (+1 for the prefix)"
        return [((math.nan,) * len(ids), err) for ids in label_ids]
    out = []
    for k, ids in enumerate(label_ids):
        by_id = {int(e[1]): e[0] for e in (entries[k + 1] or [])}
        vals = tuple(
            float(by_id[t]) if by_id.get(t) is not None and math.isfinite(float(by_id[t])) else math.nan
            for t in ids
        )
        missing = [t for t, v in zip(ids, vals, strict=True) if not math.isfinite(v)]
        out.append((vals, f"missing or non-finite logprob for label token(s) {missing}" if missing else None))
    return out


@dataclass(frozen=True)
class ForkSegments:
    """How the gated-delta-net fork (backends/sglang/hybrid) splits one packed multi-item forward of T tokens.
    `prefix_rows` / `item_rows`: batch rows of the prefixes (request order) and of the items (request, then item
    order); `*_cu`: their varlen segment starts (prefix_cu has one segment a request, item_cu one an item);
    `item_req`: the request of each item. Delimiter rows are in neither."""

    prefix_rows: list[int]
    prefix_lens: list[int]
    prefix_cu: list[int]
    item_rows: list[int]
    item_lens: list[int]
    item_cu: list[int]
    item_req: list[int]


def fork_segments(
    seq_lens: Sequence[int], delimiters: Sequence[Sequence[int]], keep_delimiter: bool = False
) -> ForkSegments:
    """The fork plan of a multi-item batch: request r has `seq_lens[r]` tokens and delimiter indices
    `delimiters[r]` = d_0 < … < d_N = len − 1 (`build`). Prefix = [0, d_0); item k = (d_{k−1}, d_k), so no
    delimiter enters any recurrence. `keep_delimiter` (a negative control only) gives item k [d_{k−1}, d_k), as
    sglang 0.5.20's built-in fork does. Raises ValueError on delimiters a fork cannot honour: empty prefix, not
    strictly increasing, an empty item, the last not at the end."""
    if len(seq_lens) != len(delimiters):
        raise ValueError(f"{len(seq_lens)} requests but {len(delimiters)} delimiter lists")
    seg = ForkSegments([], [], [0], [], [], [0], [])
    start = 0
    for r, (n, ds) in enumerate(zip(seq_lens, delimiters, strict=True)):
        ds = [int(d) for d in ds]
        if len(ds) < 2 or ds[0] < 1 or ds[-1] != n - 1:
            raise ValueError(f"request {r}: delimiters {ds[:4]}… do not frame a prefix and items in {n} tokens")
        seg.prefix_rows.extend(range(start, start + ds[0]))
        seg.prefix_lens.append(ds[0])
        seg.prefix_cu.append(seg.prefix_cu[-1] + ds[0])
        for lo, hi in zip(ds, ds[1:], strict=False):
            first = lo if keep_delimiter else lo + 1
            if hi <= lo + 1:
                raise ValueError(f"request {r}: empty item between delimiters {lo} and {hi}")
            seg.item_rows.extend(range(start + first, start + hi))
            seg.item_lens.append(hi - first)
            seg.item_cu.append(seg.item_cu[-1] + hi - first)
            seg.item_req.append(r)
        start += n
    return seg
