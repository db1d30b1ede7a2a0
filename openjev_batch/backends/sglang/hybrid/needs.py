"""The sglang names the Qwen3.5/3.6 fork (qwen3_5_mis.py) and the scheduler patches it relies on touch, each with
what the fork needs of it (`SPEC`). check.py reads them off the installed sglang, the release tool
(scripts/check_sglang_release.py, not in the wheel) off a release's source tree; both report a name by `module.name` and what it lacks."""

from __future__ import annotations

from dataclasses import dataclass

GDN = "sglang.srt.layers.attention.linear.gdn_backend"
LINEAR = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
RLA = "sglang.srt.layers.radix_linear_attention"
FB = "sglang.srt.model_executor.forward_batch_info"
POOL = "sglang.srt.mem_cache.memory_pool"


@dataclass(frozen=True)
class Need:
    """`module.name` (a dotted path inside the module: `Class.method`) must exist; `params`: parameter names its
    signature must have; `attrs`: attributes its instances must carry (classes); `methods`: methods it must have."""

    module: str
    name: str
    params: tuple[str, ...] = ()
    attrs: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    why: str = ""
    gpu_only: bool = False  # sglang imports it only on a GPU platform: elsewhere its source is read instead
    accepts: tuple[
        str, ...
    ] = ()  # keywords the fork passes that a `**kwargs` may take (the CUDA conv ignores one)


SPEC: tuple[Need, ...] = (
    # the GDN kernels, called as GDNAttnBackend.forward_extend calls them (qwen3_5_mis._extend)
    Need(
        GDN,
        "causal_conv1d_fn",
        params=(
            "conv_states",
            "has_initial_state",
            "cache_indices",
            "query_start_loc",
            "activation",
            "bias",
        ),
        # on CUDA sglang binds the name to layers/attention/mamba/causal_conv1d.causal_conv1d_fn, which takes
        # seq_lens_cpu through **kwargs (the Triton one names it): the first H200 call of issue 38 found it
        accepts=("seq_lens_cpu",),
        why="pass A/B conv over varlen segments",
    ),
    Need(GDN, "fused_qkv_split_gdn_prefill", why="q/k/v split of the conv output", gpu_only=True),
    Need(GDN, "fused_gdn_gating", why="g, beta"),
    Need(GDN, "MAX_FUSED_QKV_SPLIT_DIM", why="which split the stock path takes"),
    Need(
        GDN,
        "GDNKernelDispatcher.extend",
        params=("q", "k", "v", "g", "beta", "ssm_states", "cache_indices", "query_start_loc"),
        why="the SSM prefill with a given pool, slots and segments",
    ),  # fmt: skip
    Need(
        GDN,
        "GDNAttnBackend",
        attrs=("kernel_dispatcher", "forward_metadata", "req_to_token_pool"),
        why="the linear-attention backend the fork reads",
    ),  # fmt: skip
    Need(
        LINEAR,
        "HybridLinearAttnBackend",
        attrs=("linear_attn_backend",),
        why="get_attn_backend().linear_attn_backend",
    ),
    Need(
        "sglang.srt.layers.attention.mamba.mamba2_metadata",
        "ForwardMetadata",
        attrs=("mamba_cache_indices", "has_mamba_track_mask"),
        why="the requests' state slots",
    ),  # fmt: skip
    # the layer whose class the fork swaps, and what it reads off it
    Need(RLA, "RadixLinearAttention.forward", params=("forward_batch", "mixed_qkv", "a", "b")),
    Need(
        RLA,
        "RadixLinearAttention",
        attrs=(
            "layer_id",
            "num_q_heads",
            "num_k_heads",
            "num_v_heads",
            "head_q_dim",
            "head_k_dim",
            "head_v_dim",
            "q_dim",
            "k_dim",
            "v_dim",
            "conv_weights",
            "bias",
            "activation",
            "A_log",
            "dt_bias",
        ),
    ),  # fmt: skip
    Need("sglang.srt.model_executor.forward_context", "get_attn_backend"),
    Need(
        "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph",
        "get_tc_piecewise_forward_context",
    ),
    # the batch
    Need(
        FB,
        "ForwardBatch",
        attrs=(
            "forward_mode",
            "extend_prefix_lens_cpu",
            "extend_seq_lens_cpu",
            "multi_item_delimiter_indices",
            "positions",
            "mrope_positions",
        ),
        methods=("contains_image_inputs",),
    ),  # fmt: skip
    Need(FB, "ForwardMode", methods=("is_extend", "is_target_verify")),
    # the state pool
    Need(
        POOL,
        "HybridReqToTokenPool",
        methods=("mamba2_layer_cache", "alloc"),
        attrs=("req_index_to_mamba_index_mapping",),
        why="pools per layer; the allocation patch",
    ),  # fmt: skip
    Need(POOL, "MambaPool.State", attrs=("conv", "temporal")),
    # the classes the override subclasses (registered under the same names)
    Need(
        "sglang.srt.models.qwen3_5",
        "Qwen3_5ForConditionalGeneration",
        attrs=("is_mrope_enabled",),
        methods=("forward",),
    ),  # fmt: skip
    Need("sglang.srt.models.qwen3_5", "Qwen3_5MoeForConditionalGeneration", methods=("forward",)),
    Need("sglang.srt.models.qwen3_5_text", "Qwen3_5ForCausalLM", methods=("forward",)),
    Need("sglang.srt.models.qwen3_5_text", "Qwen3_5MoeForCausalLM", methods=("forward",)),
    Need(
        "sglang.srt.models.qwen3_5",
        "Qwen3_5ForConditionalGeneration.forward",
        params=("input_ids", "positions", "forward_batch"),
    ),  # fmt: skip
)


def missing(n: Need, got: set[str]) -> list[str]:
    """`n`'s parameters absent from `got` (a signature's names, "**" when it takes **kwargs), and its `accepts`
    when nothing takes them."""
    return [p for p in n.params if p not in got] + [p for p in n.accepts if p not in got and "**" not in got]
