"""Issue 23: where a nightly ticket job's time goes on the 35B-A3B hybrid MoE shape, and what sizing the engine
for a batch job buys. `bash benchmarks/gpu.sh w3prof [ENGINE…]` on the H200 (the kit's environment).

Per engine (random weights, `load_format=dummy`, the product's own engine defaults + the kit's triton attention,
sglang log level info so every prefill batch is logged): start and warm-up times apart (W1 16 rows, then 200
W3 tickets: the first engine compiles, later ones find the Triton cache on disk), then through the product
(`hybrid_gpu.product`: run_job on the started backend, cache flushed before each):
- a torch-profiler trace of the first forward steps of a W3 slice (`engine.start_profile(num_steps=…)`),
  summarised here: GPU kernel time by kernel family and the GPU-busy share of the traced span;
- W3 (5,000 tickets × 3 questions; env W3_ROWS), under py-spy on the first engine (all processes);
- W1 64 on the later engines.
The prefill batches of every timed part are counted from sglang's "Prefill batch" log lines (`batch_stats`),
between the markers this script prints. Engines (argv, default `default batch`):
- `default`: the product's engine defaults as shipped (sglang sizes memory for a server);
- `batch`: `mem_fraction_static` 0.9, `mamba_full_memory_ratio` 4 (state slots instead of KV tokens);
- `batch-bf16state`: `batch` + `mamba_ssm_dtype=bfloat16` (half a state; numerics differ);
- `nobuf`: `batch` + `mamba_radix_cache_strategy=no_buffer` (one slot a request, state cached at the exact prefix
  end, no overlap scheduler).
Results: $OUT/w3prof.json (saved after each part), $OUT/bench.log, $OUT/*.prof.gz, $OUT/triton-cache.tar.xz.
"""

from __future__ import annotations

import collections
import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu as bg  # noqa: E402
import hybrid_gpu as hg  # noqa: E402

T0 = time.time()
STAGE = os.environ.get("W3PROF_STAGE", "run5b")
DEADLINE = float(os.environ.get("DEADLINE_S", "565"))
RES: dict = {}
ENGINES = {
    "product": {},  # the product's own defaults (after run 5a: batch-job memory, 2 steps in flight)
    "fp8": {"quantization": "fp8"},
    "bf16state": {"mamba_ssm_dtype": "bfloat16"},  # half a recurrent state: twice the slots; numerics differ
    # plain MoE (Qwen3-30B-A3B shape) with the attention and scoring the product picks by itself (flashinfer,
    # multi-item), then the kit's triton attention with the first-branch pattern
    "30b-default": {"_model": "30b", "_attention": None},
    "30b-first-branch": {"_model": "30b", "request_pattern": "first-branch"},
    "default": {"mem_fraction_static": 0.654, "mamba_full_memory_ratio": 0.9},  # sglang's own sizing
    "batch": {"mem_fraction_static": 0.9, "mamba_full_memory_ratio": 4.0},
    "batch-bf16state": {
        "mem_fraction_static": 0.9,
        "mamba_full_memory_ratio": 4.0,
        "mamba_ssm_dtype": "bfloat16",
    },
    "nobuf": {
        "mem_fraction_static": 0.9,
        "mamba_full_memory_ratio": 4.0,
        "mamba_radix_cache_strategy": "no_buffer",
        "disable_overlap_schedule": True,
    },
}


def left() -> float:
    return DEADLINE - (time.time() - T0)


def save() -> None:
    bg.OUT.mkdir(parents=True, exist_ok=True)
    (bg.OUT / "w3prof.json").write_text(json.dumps(RES, indent=1, default=str))


def mark(tag: str) -> None:
    print(f"=== MARK {tag}", flush=True)


_BATCH = re.compile(r"Prefill batch.*?#new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def batch_stats(log_text: str, tag: str) -> dict:
    """Prefill batches sglang logged between `=== MARK tag start` and `=== MARK tag end`: count, sequences and
    new (computed) tokens per batch."""
    on, seqs, toks, cached = False, [], [], 0
    for line in log_text.splitlines():
        if line.startswith(f"=== MARK {tag} start"):
            on = True
        elif line.startswith(f"=== MARK {tag} end"):
            break
        elif on and (m := _BATCH.search(line)):
            seqs.append(int(m[1]))
            toks.append(int(m[2]))
            cached += int(m[3])
    if not toks:
        return {"batches": 0}
    s = sorted(toks)
    return {
        "batches": len(toks),
        "new_tokens": sum(toks),
        "cached_tokens": cached,
        "seqs_per_batch_mean": round(sum(seqs) / len(seqs), 1),
        "seqs_per_batch_max": max(seqs),
        "tokens_per_batch_mean": round(sum(toks) / len(toks)),
        "tokens_per_batch_p10_p50_p90": [s[len(s) // 10], s[len(s) // 2], s[9 * len(s) // 10]],
    }


def kernel_family(name: str) -> str:
    n = name.lower()
    for key, fam in (
        ("fused_moe", "moe (fused_moe)"),
        ("moe_align", "moe routing"),
        ("topk", "moe routing"),
        ("chunk_gated_delta", "gdn chunk"),
        ("chunk_fwd", "gdn chunk"),
        ("chunk_local_cumsum", "gdn chunk"),
        ("chunk_scaled_dot", "gdn chunk"),
        ("solve_tril", "gdn chunk"),
        ("recompute_w_u", "gdn chunk"),
        ("merge_16x16", "gdn chunk"),
        ("fused_gdn", "gdn chunk"),
        ("causal_conv1d", "gdn conv"),
        ("gemm", "dense gemm"),
        ("gemv", "dense gemm"),
        ("sm90_xmma", "dense gemm"),
        ("cutlass", "dense gemm"),
        ("nvjet", "dense gemm"),
        ("extend_attention", "attention"),
        ("fwd_kernel", "attention"),
        ("attn", "attention"),
        ("rmsnorm", "norm"),
        ("layernorm", "norm"),
        ("norm", "norm"),
        ("rotary", "rope"),
        ("rope", "rope"),
        ("silu", "activation"),
        ("act_and_mul", "activation"),
        ("copy", "copy / cast"),
        ("cat", "copy / cast"),
        ("elementwise", "elementwise"),
        ("reduce", "reduce"),
        ("index", "index / gather"),
        ("gather", "index / gather"),
        ("scatter", "index / gather"),
    ):
        if key in n:
            return fam
    return "other"


def summarize_trace(path: Path) -> dict:
    """GPU kernels of a torch-profiler chrome trace: total kernel time, the traced span from the first kernel's
    start to the last one's end, the busy share, kernel time by family and the top kernels."""
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt") as f:
        ev = json.load(f).get("traceEvents", [])
    ks = [e for e in ev if e.get("cat") == "kernel" and "dur" in e]
    if not ks:
        return {"kernels": 0}
    start = min(e["ts"] for e in ks)
    end = max(e["ts"] + e["dur"] for e in ks)
    total = sum(e["dur"] for e in ks)
    fam: collections.Counter = collections.Counter()
    top: collections.Counter = collections.Counter()
    cnt: collections.Counter = collections.Counter()
    for e in ks:
        fam[kernel_family(e["name"])] += e["dur"]
        top[e["name"][:90]] += e["dur"]
        cnt[e["name"][:90]] += 1
    return {
        "kernels": len(ks),
        "kernel_ms": round(total / 1e3, 1),
        "span_ms": round((end - start) / 1e3, 1),
        "gpu_busy_share": round(total / max(1, end - start), 3),
        "by_family_ms": {k: round(v / 1e3, 1) for k, v in fam.most_common()},
        "top_kernels_ms": [(k, round(v / 1e3, 1), cnt[k]) for k, v in top.most_common(25)],
    }


def slice_jsonl(src: Path, n: int, dst: Path) -> Path:
    with open(src) as f:
        dst.write_text("".join(itertools.islice(f, n)))
    return dst


def part(r: dict, key: str, need: float, fn) -> None:
    """Run one measured part when `need` seconds are left; a failure is recorded, never fatal."""
    if left() < need:
        r[key] = {"skipped": f"deadline ({round(left())} s left, needs ~{need})"}
        bg.log(key, r[key])
        save()
        return
    mark(f"{r['_tag']}/{key} start")
    t = time.perf_counter()
    try:
        r[key] = fn()
    except Exception as e:  # noqa: BLE001 - one broken part must not lose the call
        r[key] = {"failed": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2500:]}
    if isinstance(r[key], dict):
        r[key]["part_wall_s"] = round(time.perf_counter() - t, 2)
    mark(f"{r['_tag']}/{key} end")
    bg.log(key, json.dumps(r[key], default=str)[:1500])
    save()


def engine_run(name: str, m35: Path, wls: dict, first: bool) -> None:
    extra = {"load_format": "dummy", "log_level": "info", **ENGINES[name]}
    model = hg.model_30b(bg.WORK / "qwen3-30b-a3b") if extra.pop("_model", None) == "30b" else m35
    attention = extra.pop("_attention", "triton")
    pattern = extra.pop("request_pattern", None)
    r = RES[name] = {"_tag": name, "engine_args": extra}
    if left() < 150:
        r["skipped"] = f"deadline ({round(left())} s left)"
        save()
        return
    backend, start_s = bg.start_sglang_defaults(model, attention=attention, **extra)
    r["engine_start_s"] = start_s  # the product's own start: engine + its kernel warm-up
    r["startup"] = getattr(backend, "startup", None)
    try:
        info = backend.engine.get_server_info()
        st = (info.get("internal_states") or [{}])[0]
        r["state_budget"] = str(backend.state_budget)
        r["kv_capacity_tokens"] = backend.kv_capacity_tokens
        r["engine_state"] = {
            k: (st.get(k) if k in st else info.get(k))
            for k in (
                "max_mamba_cache_size",
                "max_running_requests",
                "effective_max_running_requests_per_dp",
                "mamba_radix_cache_strategy",
                "mem_fraction_static",
                "mamba_full_memory_ratio",
                "max_total_num_tokens",
                "disable_overlap_schedule",
                "mamba_ssm_dtype",
                "chunked_prefill_size",
                "quantization",
            )
        }
        r["pattern"] = backend.pattern
        bg.log(name, "engine", start_s, r["startup"], r["state_budget"], r["engine_state"])
        save()
        w3 = wls["w3"]
        wdir = bg.WORK / "hwl"
        w3_600 = slice_jsonl(w3[0], 600, wdir / "w3_600.jsonl")
        out = bg.WORK / f"w3prof_{name}"
        out.mkdir(exist_ok=True)
        prod = lambda w, f, **kw: lambda: hg.product(backend, w, out / f, **kw)  # noqa: E731
        if model is not m35:  # the 30B-A3B shape: W1 only, the product's choice or the first-branch pattern
            kw = {"pattern": "today"} if pattern == "first-branch" else {}
            part(r, "w1_256_first", 40, prod(wls["w1_256"], "w1a.parquet", **kw))
            part(r, "w1_256_again", 30, prod(wls["w1_256"], "w1b.parquet", **kw))
            if pattern == "first-branch":
                ref = bg.WORK / "w3prof_30b-default" / "w1b.parquet"
                part(r, "vs_default", 5, lambda: hg.compare(out / "w1b.parquet", ref))
            return
        # the first job on this engine right after the product's own warm-up, then again
        part(r, "w1_64_first", 40, prod(wls["w1_64"], "w1a.parquet"))
        part(r, "w1_64_again", 25, prod(wls["w1_64"], "w1b.parquet"))
        if STAGE == "run5c":  # the third call: depth 3 (--pipeline-depth) and the noise of a repeat
            part(r, "w3_product", 70, prod(w3, "w3.parquet"))
            if name == "product":
                part(r, "w3_depth3", 70, prod(w3, "w3_d3.parquet", pipeline_depth=3))
                part(r, "w1_64_depth3", 20, prod(wls["w1_64"], "w1_d3.parquet", pipeline_depth=3))
                part(r, "w1_256", 30, prod(wls["w1_256"], "w1c.parquet"))
            else:
                ref = bg.WORK / "w3prof_product"
                part(r, "vs_fp32_state_w3", 5, lambda: hg.compare(out / "w3.parquet", ref / "w3.parquet"))
                part(
                    r, "vs_fp32_state_w1_64", 5, lambda: hg.compare(out / "w1b.parquet", ref / "w1b.parquet")
                )
            return
        part(r, "w1_256", 40, prod(wls["w1_256"], "w1c.parquet"))
        part(r, "w3_product", 100, prod(w3, "w3.parquet"))
        if name == "product":
            part(r, "w3_today", 150, prod(w3, "w3_today.parquet", pattern="today"))
            part(r, "w3_compare", 5, lambda: hg.compare(out / "w3.parquet", out / "w3_today.parquet"))
        else:
            part(
                r,
                "vs_bf16_w3",
                5,
                lambda: hg.compare(out / "w3.parquet", bg.WORK / "w3prof_product" / "w3.parquet"),
            )
            part(
                r,
                "vs_bf16_w1_64",
                5,
                lambda: hg.compare(out / "w1b.parquet", bg.WORK / "w3prof_product" / "w1b.parquet"),
            )

        def traced():
            d = bg.WORK / f"torchprof_{name}"
            d.mkdir(exist_ok=True)
            bg.flush(backend.engine)
            backend.engine.start_profile(
                output_dir=str(d),
                num_steps=5,
                activities=["CPU", "GPU"],
                with_stack=False,
                record_shapes=False,
            )
            res = hg.product(backend, (w3_600, w3[1]), out / "traced.parquet")
            files: list = []
            for _ in range(40):  # the scheduler writes the trace after its last profiled step
                files = sorted(d.glob("*.json*"))
                if files:
                    break
                time.sleep(1)
            time.sleep(3)
            res["trace"] = summarize_trace(files[-1]) if files else "no trace written"
            return res

        part(r, "torch_profile_w3_600", 60, traced)
        if name == "product":
            # attribution: the same engine with one step in flight (run 5a's schedule, idle check still patched)
            def lead1():
                backend.hybrid_lead = 1
                try:
                    return hg.product(backend, w3, out / "w3_lead1.parquet")
                finally:
                    backend.hybrid_lead = 2

            part(r, "w3_product_lead1", 100, lead1)
    finally:
        backend.close()
        os.system('pkill -9 -f "[s]glang::" >/dev/null 2>&1')
        time.sleep(3)


def stats_from_log() -> None:
    p = bg.OUT / "bench.log"
    if not p.exists():
        return
    text = p.read_text(errors="replace")
    for name, r in RES.items():
        if not isinstance(r, dict):
            continue
        for key, v in r.items():
            if isinstance(v, dict) and ("s" in v or "failed" in v):
                v["prefill_batches"] = batch_stats(text, f"{name}/{key}")
    save()


def main() -> None:
    bg.WORK.mkdir(parents=True, exist_ok=True)
    names = sys.argv[1:] or ["product", "fp8"]
    m35 = hg.model_35b(bg.WORK / "qwen3.5-35b-a3b")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(m35)
    w3n = int(os.environ.get("W3_ROWS", "5000"))
    wls = hg.build_workloads(tok, bg.WORK / "hwl", rows_w1=(64, 256), w3_rows=w3n)
    wls["w3"] = wls.pop(f"w3_{w3n}")
    warm = bg.WORK / "hwl" / "warm"
    warm.mkdir(exist_ok=True)
    wls["warm"] = (slice_jsonl(wls["w1_64"][0], 16, warm / "w1.jsonl"), wls["w1_64"][1])
    RES["meta"] = {"workloads_s": round(time.time() - T0, 1), "w3_rows": w3n}
    from openjev_batch.model_info import model_info

    active = {"35b": 2.44e9, "30b": model_info(str(hg.model_30b(bg.WORK / "qwen3-30b-a3b"))).active_params}
    for w in ("w1_64", "w1_256", "w3"):
        from openjev_batch.pipeline.plan import plan

        prompts = bg.prompts_for(tok, *wls[w])
        u = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
        RES["meta"][w] = {"unique_tokens": u}
        for k, a in active.items():
            RES["meta"][w][f"roofline_{k}_s"] = round(2 * a * u / (bg.PEAK_TFLOPS * 1e12), 3) if a else None
    save()
    for k, name in enumerate(names):
        try:
            engine_run(name, m35, wls, first=k == 0)
        except Exception as e:  # noqa: BLE001
            RES.setdefault(name, {})["failed"] = f"{type(e).__name__}: {e}: {traceback.format_exc()[-2500:]}"
            save()
        stats_from_log()
    # the compiled Triton kernels, so a later call (a user's second night) starts warm
    cache = Path.home() / ".triton" / "cache"
    if cache.exists():
        tgt = bg.OUT / "triton-cache.tar.xz"
        subprocess.run(["tar", "-cJf", str(tgt), "-C", str(cache.parent), "cache"], check=False)
        RES["meta"]["triton_cache_mb"] = round(tgt.stat().st_size / 2**20, 1) if tgt.exists() else None
        if tgt.exists() and tgt.stat().st_size > 15 * 2**20:
            tgt.unlink()
    RES["meta"]["total_s"] = round(time.time() - T0, 1)
    save()


if __name__ == "__main__":
    main()
