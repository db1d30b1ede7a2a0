"""What kind of model a checkpoint is, from its config alone (pure: a dict in, a ModelInfo out; no weights).

Two properties decide how the product runs a model:
- **recurrent state** (linear attention / mamba layers: Qwen3.5, Qwen3.6, Qwen3-Next, Jamba, …): such a model
  cannot crop a cache back to the prefix, and on sglang a prefix's state is reusable only where a finished
  request left it (`../shared/research/hybrid-models.md`), so the sglang backend sends a prefix-only request
  per prefix and keeps few rows in flight (`backends/sglang/state.StateBudget`);
- **MoE** (routed experts): only the active experts count for the roofline; sglang runs them with fused
  Triton kernels whose tuned configs we may ship (`moe_configs`).
`load_config` reads `config.json` of a local folder or a hub id already in the local cache (no download:
the tokenizer/model loaders do that); `describe` is the one-line form shown by `run` and `--dry-run`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BackendError

# Layer types that carry a per-sequence recurrent state instead of (or beside) a KV cache.
RECURRENT_LAYER_TYPES = frozenset({"linear_attention", "mamba", "mamba2", "ssm", "recurrent", "conv"})
# Architectures sglang runs with its hybrid (mamba radix) cache, for configs without `layer_types`.
HYBRID_ARCH_PREFIXES = (
    "Qwen3_5",
    "Qwen3Next",
    "Jamba",
    "FalconH1",
    "NemotronH",
    "GraniteMoeHybrid",
    "Lfm2",
    "Mamba",
    "Zamba",
    "KimiLinear",
)
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@dataclass(frozen=True)
class ModelInfo:
    """`architecture`: the checkpoint's first architecture ('' if none). `recurrent_layers` /
    `attention_layers`: layer counts by kind (attention = every other layer). `experts` / `experts_per_token`:
    0 for a dense model. `active_params`: matmul parameters a token runs through (embeddings and the LM head
    left out), None when the config lacks the sizes; for the roofline only."""

    architecture: str
    model_type: str
    layers: int
    recurrent_layers: int
    experts: int
    experts_per_token: int
    active_params: int | None
    state_bytes: int | None = None  # recurrent state of one sequence (Gated DeltaNet sizes), None if unknown
    context_length: int | None = None  # max_position_embeddings: the longest sequence the backends take

    @property
    def recurrent(self) -> bool:
        """Keeps a per-sequence recurrent state (hybrid linear-attention / mamba model)."""
        return self.recurrent_layers > 0

    @property
    def moe(self) -> bool:
        return self.experts > 1

    @property
    def attention_layers(self) -> int:
        return self.layers - self.recurrent_layers

    @property
    def known(self) -> bool:
        """Whether a config was read at all."""
        return bool(self.architecture or self.model_type)

    def describe(self) -> str:
        parts = [self.architecture or self.model_type or "unknown architecture"]
        if self.recurrent:
            parts.append(
                f"hybrid: {self.recurrent_layers} recurrent-state + {self.attention_layers} attention layers"
            )
        else:
            parts.append(f"{self.layers} attention layers" if self.layers else "dense")
        if self.moe:
            parts.append(f"MoE {self.experts} experts, top-{self.experts_per_token}")
        if self.active_params:
            parts.append(f"{self.active_params / 1e9:.2f} B active params/token")
        return ", ".join(parts)


UNKNOWN = ModelInfo("", "", 0, 0, 0, 0, None)


def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a multimodal config (`text_config`, as Qwen3.5 checkpoints ship), with
    keys the outer config sets and the inner one lacks."""
    inner = cfg.get("text_config") or cfg.get("language_config") or cfg.get("llm_config")
    if isinstance(inner, dict):
        return {**{k: v for k, v in cfg.items() if k != "text_config"}, **inner}
    return cfg


def _layer_types(t: dict[str, Any], arch: str) -> list[str]:
    n = int(t.get("num_hidden_layers") or t.get("n_layer") or 0)
    types = t.get("layer_types") or t.get("layers_block_type") or t.get("hybrid_override_pattern")
    if isinstance(types, str):  # NemotronH: "M-M*-…", M = mamba, * = attention, - = MLP
        return ["mamba" if c == "M" else "attention" for c in types if c in "M*"]
    if isinstance(types, list) and types:
        return [str(x) for x in types]
    if n and arch.startswith(("MambaFor", "Mamba2For")):  # pure state-space models
        return ["mamba"] * n
    interval = t.get("full_attention_interval")
    if interval and n and arch.startswith(HYBRID_ARCH_PREFIXES):  # every interval-th layer is full
        k = int(interval)
        return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    qwen_hybrid = str(t.get("model_type", "")).startswith(("qwen3_5", "qwen3_next"))
    if n and arch.startswith(HYBRID_ARCH_PREFIXES) and qwen_hybrid:
        # transformers' default for these families: 3 linear-attention layers, then one full (interval 4)
        return ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)]
    return ["attention"] * n


def _active_params(t: dict[str, Any], types: list[str], experts: int, top_k: int) -> int | None:
    """Matmul parameters per token for Qwen/Llama-style configs (gated attention output for Qwen3.5 full
    attention; Gated DeltaNet projections for its linear layers); None when a size is missing."""
    try:
        h = int(t["hidden_size"])
        nq = int(t["num_attention_heads"])
        nkv = int(t.get("num_key_value_heads") or nq)
        hd = int(t.get("head_dim") or h // nq)
    except (KeyError, TypeError, ValueError):
        return None
    gated = str(t.get("model_type", "")).startswith(("qwen3_5", "qwen3_next"))
    attn = h * nq * hd * (2 if gated else 1) + 2 * h * nkv * hd + nq * hd * h
    nk = int(t.get("linear_num_key_heads") or 0)
    nv = int(t.get("linear_num_value_heads") or 0)
    dk = int(t.get("linear_key_head_dim") or 0)
    dv = int(t.get("linear_value_head_dim") or 0)
    linear = h * (2 * nk * dk + 2 * nv * dv + 2 * nv) + nv * dv * h
    if experts > 1:
        inter = int(t.get("moe_intermediate_size") or t.get("intermediate_size") or 0)
        shared = int(t.get("shared_expert_intermediate_size") or 0) * (
            int(t.get("n_shared_experts") or 1) if t.get("shared_expert_intermediate_size") else 0
        )
        mlp = top_k * 3 * h * inter + 3 * h * shared + h * experts + (h if shared else 0)
    else:
        mlp = 3 * h * int(t.get("intermediate_size") or 0)
    total = 0
    for kind in types:
        total += (linear if kind in RECURRENT_LAYER_TYPES and linear else attn) + mlp
    return total or None


def from_config(cfg: dict[str, Any]) -> ModelInfo:
    """ModelInfo of a checkpoint's config dict (as in config.json)."""
    archs = cfg.get("architectures") or []
    arch = str(archs[0]) if archs else ""
    t = _text_config(cfg)
    types = _layer_types(t, arch)
    recurrent = sum(1 for x in types if x in RECURRENT_LAYER_TYPES)
    experts = next((int(t[k]) for k in _EXPERT_KEYS if t.get(k)), 0)
    top_k = int(t.get("num_experts_per_tok") or t.get("moe_topk") or t.get("top_k") or 0) if experts else 0
    return ModelInfo(
        architecture=arch,
        model_type=str(t.get("model_type") or cfg.get("model_type") or ""),
        layers=len(types),
        recurrent_layers=recurrent,
        experts=experts if experts > 1 else 0,
        experts_per_token=top_k if experts > 1 else 0,
        active_params=_active_params(t, types, experts, top_k),
        state_bytes=_state_bytes(t, recurrent),
        context_length=_positive_int(t.get("max_position_embeddings")),
    )


def _positive_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _state_bytes(t: dict[str, Any], recurrent_layers: int) -> int | None:
    """One sequence's recurrent state over the Gated DeltaNet layers: the SSM state [v heads, k dim, v dim]
    in `mamba_ssm_dtype` (float32 unless the config says otherwise, as sglang) and the conv state
    [conv dim, kernel − 1] in bf16. Matches sglang 0.5.17 on the H200 (35B-A3B shape): 61.4 MiB (its log:
    1,221 slots (+1 padding) of 71.60 GiB ssm + 1.68 GiB conv state). None when the config has no
    linear-attention sizes."""
    nk, nv = int(t.get("linear_num_key_heads") or 0), int(t.get("linear_num_value_heads") or 0)
    dk, dv = int(t.get("linear_key_head_dim") or 0), int(t.get("linear_value_head_dim") or 0)
    if not (recurrent_layers and nk and nv and dk and dv):
        return None
    ssm = nv * dk * dv * (2 if str(t.get("mamba_ssm_dtype", "float32")) in ("bfloat16", "float16") else 4)
    conv = (2 * nk * dk + nv * dv) * (int(t.get("linear_conv_kernel_dim") or 4) - 1) * 2
    return recurrent_layers * (ssm + conv)


def load_config(model: str) -> dict[str, Any] | None:
    """config.json of a local model folder or of a hub id in the local Hugging Face cache; None if neither.
    A config.json that is not a JSON object is a BackendError naming the file (the hostile trial: a cut file sent
    `run`, `serve` and the API out through a JSONDecodeError traceback, exit 1)."""
    p = Path(model)
    if p.is_dir():
        f = p / "config.json"
        return _read_config(f) if f.is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a valid repo id
        return None
    return _read_config(Path(cached)) if isinstance(cached, str) else None


def _read_config(f: Path) -> dict[str, Any]:
    try:
        cfg = json.loads(f.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BackendError(f"cannot load model: {f} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise BackendError(f"cannot load model: {f} is not a JSON object (it holds a {type(cfg).__name__})")
    return cfg


def model_info(model: str) -> ModelInfo:
    """ModelInfo for a model path or hub id; UNKNOWN (dense, no experts) when its config cannot be read."""
    try:
        cfg = load_config(model)
    except (OSError, ValueError):
        return UNKNOWN
    return from_config(cfg) if cfg else UNKNOWN
