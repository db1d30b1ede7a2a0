"""The `sglang.Engine` arguments from the user's options: prefill-only GPU defaults (each measured,
docs/benchmarks.md), the CPU path, prefill graphs, the multi-item scoring choice; importing sglang with a
message that says what is missing."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ...checkpoint.info import _text_config
from ...errors import BackendError
from ..base import BackendOptions
from .attention import text_attention
from .fork_releases import at_least
from .mis import exactness
from .options import engine_arguments

NO_SGL_KERNEL = (
    "sglang's kernels (sgl_kernel) are missing: sglang runs on a CUDA GPU; on a machine without one use "
    '--backend hf (Python: backend="hf"); the tests run sglang on the CPU only through a test shim, tests/shims'
)


def import_sglang():
    """Import sglang or raise BackendError saying how to get it (or, without sgl_kernel, that it needs a GPU)."""
    try:
        import sglang
    except ImportError as e:
        if "sgl_kernel" in str(e):
            raise BackendError(NO_SGL_KERNEL) from e
        raise BackendError(
            f"the sglang backend needs sglang installed ({e}); use --backend hf "
            '(Python: backend="hf"), or run scripts/install.sh'
        ) from e
    if getattr(sglang, "__file__", None) is None:  # a folder named sglang on sys.path, not the package
        where = f"'sglang' here is the folder {list(sglang.__path__)[0]}, not the package"
        raise BackendError(f"the sglang backend needs sglang installed; {where} (run elsewhere, or use --backend hf)")
    return sglang


# Prefill CUDA graphs: sglang ≥ 0.5.17 captures a "breakable" prefill graph (eager attention between captured
# pieces) per token count; a forward pads up to the next captured size (at most 2×, sglang's limit). Its
# default list for a 32k budget has 106 sizes (engine start 35 → 77 s on the H200); these 19, ~1.3× apart,
# keep the padding ≤ 33 % for a fraction of the capture time. Decode graphs stay off (nothing decodes).
PREFILL_GRAPH_TOKENS = (
    512,
    768,
    1024,
    1280,
    1536,
    2048,
    2560,
    3072,
    4096,
    5120,
    6144,
    8192,
    10240,
    12288,
    16384,
    20480,
    24576,
    28672,
    32768,
)


# Off: with these 19 sizes the 0.6B jobs ran no faster on the H200 (W1 2.16 vs 2.14–2.38 s, W2 17.3 vs 17.1 s,
# W3 16.4 vs 15.6 s; capture ~9 s; benchmarks/results/2026-12-01-h200-issue19.md): the scheduler's per-request
# CPU time, not kernel launches, bounds them. A multi-item engine has no CUDA graphs at all.
PREFILL_GRAPHS_DEFAULT = False


def prefill_graph_args(sizes: tuple[int, ...] = PREFILL_GRAPH_TOKENS) -> dict[str, Any]:
    """Engine args for prefill CUDA graphs of these token counts without decode graphs (sglang ≥ 0.5.17;
    the legacy `disable_cuda_graph=True` turns off both)."""
    return {
        "disable_cuda_graph": False,
        "disable_decode_cuda_graph": True,
        "cuda_graph_bs_prefill": list(sizes),
    }


def gpu_prefill_defaults(fields: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Engine defaults for prefill-only work on a GPU, each measured on the H200 (docs/benchmarks.md):
    no decode CUDA graphs (decoding never runs here; skipping their capture saves start time and memory),
    prefill graphs per PREFILL_GRAPHS_DEFAULT where sglang has them (`fields`: ServerArgs' field names),
    and on a GPU of ≥ 80 GiB a 32k-token prefill budget instead of sglang's 16k (W1 0.6B: fewer, larger
    extend batches, 2.8 → 2.3 s). `--engine-arg` overrides any of them."""
    import torch

    kw: dict[str, Any] = {"disable_cuda_graph": True}
    if PREFILL_GRAPHS_DEFAULT and {"disable_decode_cuda_graph", "cuda_graph_bs_prefill"} <= set(fields):
        kw = prefill_graph_args()
    if torch.cuda.is_available() and torch.cuda.get_device_properties(0).total_memory >= 80 * 2**30:
        kw.update(chunked_prefill_size=32_768, max_prefill_tokens=32_768)
    return kw


# A batch job owns its GPU: for recurrent-state (hybrid) models sglang's server sizing leaves most of it unused
# (0.5.17 on the H200, 35B-A3B shape: mem_fraction_static 0.654, states:KV memory 0.9 → 207 state slots, at most
# 69 running requests, beside a 727k-token KV pool a prefix-first job never fills). Measured in one run
# (benchmarks/results/2026-12-01-h200-w3prof*.json): 0.9 and a 4:1 state share give 807 slots, ≤ 269 running,
# and still 636k KV tokens. `--engine-arg` (and --mem-fraction-static) win.
HYBRID_BATCH_MEMORY = {"mem_fraction_static": 0.9, "mamba_full_memory_ratio": 4.0}


def hybrid_batch_memory(kw: dict[str, Any], recurrent: bool, fields: set[str]) -> dict[str, Any]:
    """The batch-job memory split for a recurrent-state model on a GPU, for each key the user left unset
    (and this sglang has). Returns what was set (for the run summary)."""
    if not recurrent or kw.get("device") != "cuda":
        return {}
    chosen = {k: v for k, v in HYBRID_BATCH_MEMORY.items() if k in fields and kw.get(k) is None}
    kw.update(chosen)
    return chosen


# Multi-item scoring when the user does not choose (`--engine-arg enable_mis=true|false`): on a CUDA GPU, for
# models where it is exact, when the attention backend is unset or flashinfer. Measured on one H200, same run,
# against first-branch (benchmarks/results/2026-12-01-h200-issue19.md): 0.6B W1 2.14–2.38 → 1.33–1.39 s, W2
# 17.1 → 11.2 s, W3 15.6 → 11.0 s; 8B W1 8.55 s; answers agree where the top two are > 0.1 apart.
MULTI_ITEM_DEFAULT = True


def choose_multi_item(opts: BackendOptions, kw: dict[str, Any], sglang_version: str = "0.5.17") -> str | None:
    """Decide multi-item scoring for an engine about to start with `kw` (from `engine_kwargs`); sets
    `enable_mis` and flashinfer attention in `kw` when it is chosen. Returns None when it is on, else why not.
    Raises BackendError when the user asked for it (`enable_mis=true`) and it cannot be exact or cannot run."""
    asked = opts.sglang.engine_args.get("enable_mis")
    pattern = opts.sglang.request_pattern  # --request-pattern multi-item asks for it too
    if pattern != "auto" and asked is not None and bool(asked) != (pattern == "multi-item"):
        raise BackendError(f"--request-pattern {pattern} contradicts --engine-arg enable_mis={asked}")
    if pattern != "auto":
        asked = pattern == "multi-item"
    if asked is not None and not asked:
        kw.pop("enable_mis", None)
        return f"turned off ({'--request-pattern ' + pattern if pattern != 'auto' else 'enable_mis=false'})"
    why = None
    if not at_least(sglang_version, "0.5.17"):  # items are read only from prefill-only requests
        why = f"needs sglang >= 0.5.17, not {sglang_version}"
    elif kw.get("device") != "cuda":
        why = "needs a CUDA GPU (flashinfer attention)"
    elif opts.sglang.attention_backend not in (None, "flashinfer"):
        why = f"needs flashinfer attention, not {opts.sglang.attention_backend}"
    elif asked is None and not MULTI_ITEM_DEFAULT:
        return "off by default"
    else:
        try:
            from transformers import AutoConfig

            why = exactness(AutoConfig.from_pretrained(opts.model), sglang_version)
        except Exception as e:  # noqa: BLE001 - an unreadable config only means: no multi-item scoring
            why = f"cannot read the model config ({type(e).__name__})"
    if why is not None:
        if asked:
            how = "--request-pattern multi-item" if pattern == "multi-item" else "enable_mis=true"
            raise BackendError(f"multi-item scoring ({how}) is not possible here: {why}")
        kw.pop("enable_mis", None)
        return why
    kw.update(enable_mis=True, attention_backend="flashinfer")
    return None


def text_only(kw: dict[str, Any], opts: BackendOptions) -> None:
    """`enable_multimodal=False` for a multimodal checkpoint (Qwen3.5/3.6 `…ForConditionalGeneration`) whose job is
    text only, unless the user set it: sglang would load an image processor at start (`OSError: Can't load image
    processor …` without preprocessor_config.json, seen on 0.5.17); its tokenizer manager, scheduler and worker then
    load the plain tokenizer. Requests are token ids, so nothing needs the processor."""
    if "enable_multimodal" in opts.sglang.engine_args:
        return
    from sglang.srt.server_args import ServerArgs

    if "enable_multimodal" in ServerArgs.__dataclass_fields__:  # sglang 0.5.17–0.5.19 have it
        kw["enable_multimodal"] = False


# sglang load formats that never unpickle: safetensors files, random weights, GGUF (a flat binary format)
SAFE_LOAD_FORMATS = frozenset({"safetensors", "fastsafetensors", "dummy", "gguf"})


CPU_KV_TOKENS = 65_536  # the CPU engine's KV pool, at most (tokens)
CPU_KV_BUDGET = 512 << 20  # bytes of KV the CPU engine's memory share is sized for


def cpu_mem_fraction(model: str, kv_tokens: int, available: int | None = None) -> float:
    """sglang's `mem_fraction_static` for the CPU engine, sized from the model: on CPU it is the share of the
    available RAM (`available`, default psutil's) that weights + KV pool may take, so a fixed 0.05 fit
    SmolLM2-135M but not Qwen2.5-0.5B (2 GB of float32 weights; issue 26: the engine refused to start and
    asked for > 0.11). Here: 1.25 × (float32 weights + a KV budget) + 512 MiB, between 0.05 and 0.9; the KV
    budget is a float32 pool of `kv_tokens`, at most CPU_KV_BUDGET (sglang sizes the pool to what is left,
    and 0.05 of this machine's RAM, ~0.4 GB of KV for SmolLM2, ran every CPU test). A model whose folder or
    config cannot be read keeps 0.05."""
    import json
    from pathlib import Path

    folder = Path(model)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        files = list(folder.glob("*.safetensors")) + list(folder.glob("*.bin"))
        stored = sum(f.stat().st_size for f in files)
    except (OSError, ValueError):
        return 0.05
    t = _text_config(cfg)
    dtype = str(t.get("torch_dtype") or cfg.get("torch_dtype") or t.get("dtype") or cfg.get("dtype") or "")
    weights = stored * (2 if dtype in ("bfloat16", "float16") else 1)  # loaded as float32 on CPU
    try:
        nq = int(t["num_attention_heads"])
        head = int(t.get("head_dim") or int(t["hidden_size"]) // nq)
        kv = int(t["num_hidden_layers"]) * 2 * int(t.get("num_key_value_heads") or nq) * head * 4 * kv_tokens
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        kv = 0
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    need = 1.25 * (weights + min(kv, CPU_KV_BUDGET)) + (512 << 20)
    return round(min(0.9, max(0.05, need / max(available, 1))), 3)


def _trusted_engine_args(opts: BackendOptions) -> dict[str, Any]:
    """The `--engine-arg`s, refused (BackendError) where one would run the checkpoint's code or load pickle
    weights without the option that allows it."""
    given = opts.sglang.engine_args
    if given.get("trust_remote_code") and not opts.trust_remote_code:
        raise BackendError(
            "--engine-arg trust_remote_code=true runs the checkpoint's own code: add --trust-remote-code"
        )
    if (
        "load_format" in given
        and str(given["load_format"]) not in SAFE_LOAD_FORMATS
        and not opts.allow_pickle
    ):
        raise BackendError(
            f"--engine-arg load_format={given['load_format']} can load pickle weights, which can run code: "
            f"add --allow-pickle (or use one of {', '.join(sorted(SAFE_LOAD_FORMATS))})"
        )
    return given


class EngineKwargs(dict):
    """`sglang.Engine` keyword arguments; `batch_memory`: the batch-job memory split set in them, `attention`:
    the attention kernel chosen for sglang where its own choice is missing here, in words (the run summary
    names both)."""

    batch_memory: dict[str, Any] = {}
    attention: str = ""


def engine_kwargs(opts: BackendOptions, recurrent: bool = False, **extra: Any) -> EngineKwargs:
    """`sglang.Engine` keyword arguments from the user's options: prefill-only defaults, sglang's CPU path
    when there is no GPU, the declared options that are set, `extra` (e.g. is_embedding), then `--engine-arg`s,
    which win; for a `recurrent`-state model on a GPU, the batch-job memory split where the user left it.
    Raises BackendError for an engine arg that `ServerArgs` does not have (never silently ignored)."""
    from sglang.srt.server_args import ServerArgs

    fields = {f.name for f in dataclasses.fields(ServerArgs)}
    if unknown := sorted(set(opts.sglang.engine_args) - fields):
        raise BackendError(f"unknown sglang engine arg(s): {', '.join(unknown)}")
    device = opts.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    kw: dict[str, Any] = dict(
        model_path=opts.model,
        device=device,
        log_level="warning",
        random_seed=0,
        skip_tokenizer_init=True,
    )
    if device == "cpu":
        # sglang's CPU path: native attention, no CUDA graphs, float32, a fixed KV pool (else sized from RAM).
        # sleep_on_idle: an idle scheduler otherwise busy-polls a whole core, which on a CPU machine is
        # taken from the model's own forward passes (it waits on its sockets, so a request wakes it at once).
        os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
        kw.update(
            attention_backend="torch_native",
            disable_cuda_graph=True,
            dtype="float32",
            mem_fraction_static=cpu_mem_fraction(opts.model, CPU_KV_TOKENS),
            max_total_tokens=CPU_KV_TOKENS,
            sleep_on_idle=True,
        )
    else:
        kw.update(gpu_prefill_defaults(fields))
    kw.update(engine_arguments(opts))  # the declared engine options that are set (options.ENGINE_OPTIONS)
    # sglang's "auto" loader reads .bin pickles and retries a legacy-tar one with weights_only=False, which
    # runs its code; "safetensors" reads nothing else. Its model config honours trust_remote_code.
    kw["trust_remote_code"] = opts.trust_remote_code
    if not opts.allow_pickle:
        kw["load_format"] = "safetensors"
    kw.update(extra)
    kw.update(_trusted_engine_args(opts))
    out = EngineKwargs(kw)
    out.batch_memory = hybrid_batch_memory(out, recurrent, fields)
    if device == "cuda" and out.get("attention_backend") is None:  # the user chose none
        out.attention = text_attention(out)
    return out
