"""Qwen3.5/3.6 (dense and MoE; multimodal and text-only classes) with exact multi-item scoring, for the sglang releases
``fork_releases.FORK_SGLANG`` lists (its verification: ``fork_releases.fork_note``).

Imported by sglang's model registry in the scheduler process (see ``__init__``); needs CUDA kernels. Two changes to
the stock classes, nothing else (weights, loading and every other batch run the inherited code):

1. **The gated-delta-net layers fork at the prefix end.** In a multi-item batch each request is
   ``prefix D item_1 D … item_N D`` (``mis.build``). Stock 0.5.17 runs the recurrence (conv window + SSM state)
   straight through it, so item k starts from the state after D item_1 … D (sgl-project/sglang#31969). Here each
   GDN layer runs two varlen passes with sglang's own kernels (the calls of ``GDNAttnBackend.forward_extend``):
   pass A over the prefixes (the request's own state slot, zeroed at allocation, as for a prefix-only request),
   pass B over the items, each from a copy of its request's prefix-end conv and SSM state. Delimiter rows are left
   out of both passes (their output is 0; attention masks them for items and nobody reads their logits).
2. **M-RoPE gets the per-item positions.** flashinfer's multi-item set-up rewrites ``forward_batch.positions`` so
   item token j sits at prefix_len + j (``flashinfer_backend.py:650-652``), but the multimodal classes read
   ``forward_batch.mrope_positions`` (``qwen3_vl.py:1403``), three rows of the packed arange. For text-only batches
   the three M-RoPE rows equal the 1-D position, so they are set from the rewritten positions.

The segment plan (``mis.fork_segments``, pure Python) is built once per forward from CPU data (no GPU sync) and
cached on the ForwardBatch object, which belongs to one forward only, never on a module (overlap scheduling).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from .check import check_installed

# Before the sglang names below are bound: a release that moved one fails here, naming each (hybrid/check.py)
check_installed()

from sglang.srt.layers.attention.linear import gdn_backend as _gdn  # noqa: E402
from sglang.srt.layers.radix_linear_attention import RadixLinearAttention  # noqa: E402
from sglang.srt.model_executor.forward_context import get_attn_backend  # noqa: E402
from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph import (  # noqa: E402
    get_tc_piecewise_forward_context,
)
from sglang.srt.models import qwen3_5 as _mm  # noqa: E402
from sglang.srt.models import qwen3_5_text as _text  # noqa: E402

from .. import mis  # noqa: E402
from . import CONTROL_ENV, FORK_VERSION, MARKER  # noqa: E402

_PLAN_ATTR = "_openjev_fork_plan"


def _is_mis_extend(forward_batch: Any) -> bool:
    return (
        forward_batch.forward_mode.is_extend()
        and not forward_batch.forward_mode.is_target_verify()
        and getattr(forward_batch, "multi_item_delimiter_indices", None) is not None
    )


class _Plan:
    """The per-forward fork plan as device tensors. Rows index the packed batch (T tokens)."""

    def __init__(self, forward_batch: Any, device: torch.device):
        prefix_lens = forward_batch.extend_prefix_lens_cpu or []
        if any(int(p) for p in prefix_lens):  # MIS turns the radix cache off: a cached prefix would be a bug
            raise RuntimeError(f"multi-item batch with cached prefix tokens {list(prefix_lens)}")
        seg = mis.fork_segments(
            [int(n) for n in forward_batch.extend_seq_lens_cpu],
            [d.tolist() for d in forward_batch.multi_item_delimiter_indices],
            keep_delimiter=os.environ.get(CONTROL_ENV) == "keep-delimiter",
        )

        def dev(x: list[int], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(x, dtype=dtype, pin_memory=True).to(device, non_blocking=True)

        self.prefix_rows = dev(seg.prefix_rows, torch.int64)  # (Tp,)
        self.item_rows = dev(seg.item_rows, torch.int64)  # (Ti,)
        self.prefix_cu = dev(seg.prefix_cu, torch.int32)  # (R+1,)
        self.item_cu = dev(seg.item_cu, torch.int32)  # (M+1,)
        self.item_req = dev(seg.item_req, torch.int64)  # (M,) request of each item
        self.prefix_lens = seg.prefix_lens  # CPU ints, the conv kernel's seq_lens_cpu
        self.item_lens = seg.item_lens
        self.n_req, self.n_items = len(seg.prefix_lens), len(seg.item_lens)


def _plan(forward_batch: Any, device: torch.device) -> _Plan:
    plan = getattr(forward_batch, _PLAN_ATTR, None)
    if plan is None:
        plan = _Plan(forward_batch, device)
        setattr(forward_batch, _PLAN_ATTR, plan)
    return plan


def _extend(layer, gdn, x, a, b, conv, ssm, idx, cu, lens, has_init):
    """One varlen GDN prefill over segments `cu` of x (T', dim): sglang 0.5.17's `GDNAttnBackend.forward_extend`
    (non-verify, untracked) with the state pool, slot indices and segments given. Updates conv[idx], ssm[idx] in
    place. Returns the core output (1, T', HV, V)."""
    n = x.shape[0]
    y = _gdn.causal_conv1d_fn(
        x.transpose(0, 1),  # (dim, T'): a strided view, as the stock call passes it
        layer.conv_weights,
        layer.bias,
        activation=layer.activation,
        conv_states=conv,
        has_initial_state=has_init,
        cache_indices=idx,
        query_start_loc=cu,
        seq_lens_cpu=lens,
    ).transpose(0, 1)[:n]
    if layer.q_dim + layer.k_dim + layer.v_dim <= _gdn.MAX_FUSED_QKV_SPLIT_DIM:
        q, k, v = _gdn.fused_qkv_split_gdn_prefill(
            y,
            layer.num_q_heads,
            layer.num_k_heads,
            layer.num_v_heads,
            layer.head_q_dim,
            layer.head_k_dim,
            layer.head_v_dim,
        )
    else:
        q, k, v = torch.split(y, [layer.q_dim, layer.k_dim, layer.v_dim], dim=-1)
        q = q.view(1, n, layer.num_q_heads, layer.head_q_dim)
        k = k.view(1, n, layer.num_k_heads, layer.head_k_dim)
        v = v.view(1, n, layer.num_v_heads, layer.head_v_dim)
    g, beta = _gdn.fused_gdn_gating(layer.A_log, a, b, layer.dt_bias)
    out, _, _ = gdn.kernel_dispatcher.extend(
        q=q, k=k, v=v, g=g, beta=beta, ssm_states=ssm, cache_indices=idx, query_start_loc=cu
    )
    return out


class ForkingLinearAttention(RadixLinearAttention):
    """A GDN layer's core that forks the recurrent state per item in multi-item batches; every other batch runs
    the stock path. Swapped in by class (``__class__``), so parameters and weight loading are unchanged."""

    def forward(self, forward_batch, mixed_qkv, a, b):
        if not _is_mis_extend(forward_batch):
            return super().forward(forward_batch, mixed_qkv, a, b)
        if get_tc_piecewise_forward_context() is not None:  # sglang turns graphs off for MIS; never silently
            raise RuntimeError("multi-item batch inside a piecewise CUDA graph: the GDN fork cannot run there")
        gdn = get_attn_backend().linear_attn_backend
        meta = gdn.forward_metadata
        if meta.has_mamba_track_mask:
            raise RuntimeError("multi-item batch with mamba state tracking on (radix cache must be off)")
        cache = gdn.req_to_token_pool.mamba2_layer_cache(self.layer_id)
        conv, ssm = cache.conv[0], cache.temporal  # (slots, dim, K-1), (slots, HV, K, V)
        slots = meta.mamba_cache_indices  # (R,) the requests' state slots
        plan = _plan(forward_batch, mixed_qkv.device)
        T = mixed_qkv.shape[0]
        out = mixed_qkv.new_zeros((1, T, self.num_v_heads, self.head_v_dim))

        # pass A: prefixes from the zeroed slot; leaves each request's prefix-end state in its own slot
        gather = not conv.is_contiguous() or not ssm.is_contiguous()  # page-major pools: as the stock path
        conv_a = conv[slots].contiguous() if gather else conv
        ssm_a = ssm[slots].contiguous() if gather else ssm
        idx_a = torch.arange(plan.n_req, device=slots.device, dtype=slots.dtype) if gather else slots
        rows = plan.prefix_rows
        out_a = _extend(
            self, gdn, mixed_qkv[rows], a[rows], b[rows], conv_a, ssm_a, idx_a, plan.prefix_cu,
            plan.prefix_lens, torch.zeros(plan.n_req, dtype=torch.bool, device=slots.device),
        )  # fmt: skip
        out[0, rows] = out_a[0]
        if gather:
            conv[slots], ssm[slots] = conv_a, ssm_a

        # pass B: every item from a copy of its request's prefix-end state (the kernels write states in place)
        if plan.n_items:
            src = idx_a[plan.item_req]
            conv_b = conv_a[src].contiguous()  # (M, dim, K-1)
            ssm_b = ssm_a[src].contiguous()  # (M, HV, K, V)
            rows = plan.item_rows
            out_b = _extend(
                self, gdn, mixed_qkv[rows], a[rows], b[rows], conv_b, ssm_b,
                torch.arange(plan.n_items, device=slots.device, dtype=slots.dtype), plan.item_cu,
                plan.item_lens, torch.ones(plan.n_items, dtype=torch.bool, device=slots.device),
            )  # fmt: skip
            out[0, rows] = out_b[0]
        return out


class _ForkingModel:
    """Mixin for the model classes: swap every GDN core for ForkingLinearAttention; for M-RoPE models give
    text-only multi-item batches the per-item positions; answer the start-up probe."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n = 0
        for m in self.modules():
            if type(m) is RadixLinearAttention:
                m.__class__ = ForkingLinearAttention
                n += 1
        self._openjev_forked_layers = n

    def forward(self, input_ids, positions, forward_batch, *args, **kwargs):
        if (
            getattr(self, "is_mrope_enabled", False)
            and _is_mis_extend(forward_batch)
            and not forward_batch.contains_image_inputs()
            and os.environ.get(CONTROL_ENV) != "no-mrope"
        ):
            # (3, T): flashinfer's init_forward_metadata (run before forward) rewrote forward_batch.positions per item
            forward_batch.mrope_positions = forward_batch.positions.unsqueeze(0).expand(3, -1).contiguous()
        return super().forward(input_ids, positions, forward_batch, *args, **kwargs)

    def get_weights_by_name(self, name: str, truncate_size: int = 100, tp_size: int = 1):
        if name == MARKER:
            # [version, GDN layers forked, 1.0 when the class reads M-RoPE positions]
            return [FORK_VERSION, float(self._openjev_forked_layers), float(getattr(self, "is_mrope_enabled", False))]
        return None  # the stock classes have no such hook (sglang answers None)


class Qwen3_5ForConditionalGeneration(_ForkingModel, _mm.Qwen3_5ForConditionalGeneration):  # noqa: N801
    pass


class Qwen3_5MoeForConditionalGeneration(_ForkingModel, _mm.Qwen3_5MoeForConditionalGeneration):  # noqa: N801
    pass


class Qwen3_5ForCausalLM(_ForkingModel, _text.Qwen3_5ForCausalLM):  # noqa: N801
    pass


class Qwen3_5MoeForCausalLM(_ForkingModel, _text.Qwen3_5MoeForCausalLM):  # noqa: N801
    pass


EntryClass = [
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeForConditionalGeneration,
    Qwen3_5ForCausalLM,
    Qwen3_5MoeForCausalLM,
]
