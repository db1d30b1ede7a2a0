"""Test-only pure-PyTorch stand-in for the CPU build of sgl-kernel (not published on PyPI).

With SGLANG_USE_CPU_ENGINE=1 sglang imports a few `*_cpu` helpers from sgl_kernel at import time. On a
CPU without AMX every layer takes its `forward_native` path, so only the two KV-cache bookkeeping helpers
below run; the speculative-decoding helpers raise. Put this folder on PYTHONPATH (tests/conftest.py does)
so sglang's spawned scheduler and detokenizer processes import it too.
"""

import ctypes

__version__ = "0.0.0+openjev-test-shim"


def assign_req_to_token_pool_cpu(
    req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len
):
    # req_to_token[req_pool_indices[i], start[i]:end[i]] = the next (end - start) entries of out_cache_loc
    pt = 0
    for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        if e > s:
            req_to_token[r, s:e] = out_cache_loc[pt : pt + e - s].to(req_to_token.dtype)
        pt += max(e - s, 0)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    # For every K/V buffer (one per layer), copy row src_loc[j] to tgt_loc[j]; rows are strides[i] bytes.
    pairs = [(s, t) for s, t in zip(src_loc.tolist(), tgt_loc.tolist(), strict=True) if s != t]
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        for s, t in pairs:
            ctypes.memmove(base + t * stride, base + s * stride, stride)


def _unsupported(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: not in the CPU test shim (speculative decoding)")

    fn.__name__ = name
    return fn


for _name in (
    "rotate_input_ids_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "build_draft_decode_metadata_cpu",
):
    globals()[_name] = _unsupported(_name)
del _name


def _declare_ops():
    """sglang's Qwen3.5 model module reads these CPU ops from `torch.ops.sgl_kernel` when it is imported, and
    its Qwen-VL image processor (every Qwen VL model's, Qwen3-VL's included) imports that module: without them
    `No processor registered for architecture` at engine start. Declared only (no kernel): calling one fails,
    which only a Qwen3.5 model on the CPU engine would do (its linear attention needs the real CPU build)."""
    import torch

    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name in (
        "fused_sigmoid_mul_cpu",
        "fused_qk_gemma_rmsnorm_cpu",
        "fused_qk_gemma_rmsnorm_with_gate_cpu",
        "fused_qkvzba_split_reshape_cat_contiguous_cpu",
        "fused_input_proj_cpu",
    ):
        if not hasattr(torch.ops.sgl_kernel, name):
            lib.define(f"{name}(Tensor[] args) -> ()")
    return lib


_LIB = _declare_ops()  # kept: a Library's definitions vanish when it is garbage-collected
