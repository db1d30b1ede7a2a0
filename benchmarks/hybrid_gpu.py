"""Hybrid linear-attention MoE (Qwen3.5 / 3.6-35B-A3B shape) and plain MoE (Qwen3-30B-A3B shape) on the H200
(issue 17). Run through `benchmarks/gpu.sh hybrid` (the kit's environment), or `--cpu-smoke` here (tiny dense
model, sglang's CPU engine, the hybrid pattern forced) to check every code path before a device call.

Per engine (random weights, `load_format=dummy`, the product's own engine defaults + the kit's needs), cache
flushed before each measurement:
- the product (`run_job`; for a hybrid model: prefix-only requests, state-budgeted groups),
- today's pattern (`run_job` with the dense pattern: first branch as the warm-up, 8 groups × 2 in flight),
- chunked prefix-first baselines: per chunk of C rows, one `generate` with its prefixes, then one with its
  branches, chunks one after another (C = all rows, 32, 8),
on W1-like jobs (64 and 256 rows × 8 questions, ~1,000-token prefix) and a W3-like one (tickets × 3).
Reported: wall, prefix tokens served from the radix cache (Σ cached / Σ prefix tokens of the branches),
% of the roofline (2 × active params × unique tokens / 788 TFLOP/s), answers of the product vs today's path.
A deadline (env DEADLINE_S, seconds from start) skips what would not finish; results are saved as they land.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gpu as bg  # noqa: E402  (ROOT on sys.path, WORK, OUT, save, log, flush, tokenizer_dir …)

T0 = time.time()
DEADLINE = float(os.environ.get("DEADLINE_S", "560"))


def left() -> float:
    return DEADLINE - (time.time() - T0)


def model_35b(d: Path) -> Path:
    """transformers' Qwen3_5MoeTextConfig() defaults (the 35B-A3B layout) as Qwen3_5MoeForCausalLM, plus
    full_attention_interval 4 (sglang 0.5.17 reads it), config only: the engine runs load_format=dummy."""
    from transformers import Qwen3_5MoeTextConfig

    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        for f in bg.tokenizer_dir().iterdir():
            shutil.copy(f, d)
        cfg = Qwen3_5MoeTextConfig().to_dict()
        cfg.update(architectures=["Qwen3_5MoeForCausalLM"], full_attention_interval=4, torch_dtype="bfloat16")
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def model_30b(d: Path) -> Path:
    """Qwen3-30B-A3B shape: 48 layers, hidden 2048, 32 Q / 4 KV heads × 128, 128 experts top-8, 768."""
    from transformers import Qwen3MoeConfig

    if not (d / "config.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        for f in bg.tokenizer_dir().iterdir():
            shutil.copy(f, d)
        cfg = Qwen3MoeConfig(
            vocab_size=151936,
            hidden_size=2048,
            num_hidden_layers=48,
            num_attention_heads=32,
            num_key_value_heads=4,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
            intermediate_size=6144,
            max_position_embeddings=40960,
            rope_theta=1000000,
            torch_dtype="bfloat16",
        )
        cfg.architectures = ["Qwen3MoeForCausalLM"]
        cfg.save_pretrained(d)
    return d


def build_workloads(tok, base: Path, rows_w1=(64, 256), w3_rows=5000) -> dict:
    import workloads as wl

    out = {}
    for n in rows_w1:
        d = base / f"w1_{n}"
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "w1.jsonl").exists():
            wl.w1(tok, d, rows=n)
        out[f"w1_{n}"] = (d / "w1.jsonl", d / "w1_questions.json")
    if w3_rows > 0:
        d = base / f"w3_{w3_rows}"
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "w3.jsonl").exists():
            wl.w3(tok, d, rows=w3_rows)
        out[f"w3_{w3_rows}"] = (d / "w3.jsonl", d / "w3_questions.json")
    return out


# the product's own choice (--request-pattern auto); the CPU smoke forces prefix-first
PRODUCT_PATTERN = "auto"


def product(backend, paths, out: Path, pattern: str = "product", **options) -> dict:
    """run_job end to end; `pattern` "today" runs the dense pattern (--request-pattern first-branch: the
    first branch as the warm-up) on the same engine; `options`: documented run options (pipeline_depth=…)."""
    from openjev_batch.config import build_config
    from openjev_batch.pipeline.job import run_job

    cfg = build_config(
        input=paths[0], output=out, model="-", backend="sglang", questions_file=paths[1], progress=False,
        request_pattern="first-branch" if pattern == "today" else PRODUCT_PATTERN, **options,
    )  # fmt: skip
    bg.flush(backend.engine)
    t = time.perf_counter()
    s = run_job(cfg, backend=backend)
    wall = time.perf_counter() - t
    return {
        "s": round(wall, 3),
        "rows": s.rows,
        "questions": s.questions,
        "errors": s.errors,
        "branch_tokens": s.branch_tokens,
        "prefix_tokens": s.prefix_tokens,
        "cached_tokens": s.cached_tokens,
        "warm_tokens": s.warm_tokens,
        "prefix_from_cache": round(s.cached_tokens / s.prefix_tokens, 4) if s.prefix_tokens else None,
        "radix_served": round(s.cached_tokens / s.branch_tokens, 4) if s.branch_tokens else None,
        "computed_tokens": s.computed_tokens,
        "pattern": s.pattern if pattern == "product" else "today (first branch as the warm-up)",
    }


def chunked(engine, prompts, chunk: int | None, overlap: bool = False) -> dict:
    """Prefix-first baseline: per chunk of rows, their distinct prefixes in one generate call (prefill only,
    carrying token_ids_logprob: sglang#34719), then their branches in one call; chunks in sequence.
    `overlap`: chunk k's branches and chunk k+1's prefixes in ONE call (branches first, so the scheduler
    admits them first): one forward pass per chunk instead of two."""

    def gen(ids, labels):
        return engine.generate(
            input_ids=ids,
            sampling_params={"max_new_tokens": 0, "temperature": 0},
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=labels,
        )

    def pre(part):
        d = {rp.prefix: list(rp.branches[0].label_ids) for rp in part}
        return [list(p) for p in d], list(d.values())

    bg.flush(engine)
    n = chunk or len(prompts)
    parts = [prompts[i : i + n] for i in range(0, len(prompts), n)]
    cached = branch = prefix = 0
    t = time.perf_counter()
    if overlap:
        gen(*pre(parts[0]))
    for k, part in enumerate(parts):
        if not overlap:
            gen(*pre(part))
        ids = [list(rp.prefix + b.suffix) for rp in part for b in rp.branches]
        labels = [list(b.label_ids) for rp in part for b in rp.branches]
        m = len(ids)
        if overlap and k + 1 < len(parts):
            pi, pl = pre(parts[k + 1])
            ids, labels = ids + pi, labels + pl
        outs = gen(ids, labels)[:m]
        cached += sum(o["meta_info"]["cached_tokens"] for o in outs)
        branch += sum(len(rp.prefix) + len(b.suffix) for rp in part for b in rp.branches)
        prefix += sum(len(rp.prefix) for rp in part for _ in rp.branches)
    dt = time.perf_counter() - t
    return {
        "s": round(dt, 3),
        "chunk_rows": n,
        "prefix_from_cache": round(cached / prefix, 4),
        "radix_served": round(cached / branch, 4),
    }


def compare(a: Path, b: Path) -> dict:
    """Answers of two outputs of the same job: max |Δ prob|, answer agreement (bf16 batch noise only)."""
    import pyarrow.parquet as pq

    x, y = pq.read_table(a).to_pylist(), pq.read_table(b).to_pylist()
    d = [
        abs(p - q)
        for r, s in zip(x, y, strict=True)
        if r["probs"] and s["probs"]
        for p, q in zip(r["probs"], s["probs"], strict=True)
    ]
    agree = sum(r["answer"] == s["answer"] for r, s in zip(x, y, strict=True)) / max(1, len(x))
    return {"max_abs_prob_diff": max(d) if d else math.nan, "answer_agreement": round(agree, 4), "n": len(x)}


def bench_engine(key: str, model_dir: Path, wls: dict, plan_items: list, extra: dict, res: dict) -> None:
    """One engine; `plan_items`: (workload, what) with what in product | today | chunk:N | chunk:all |
    compare (product vs today answers); each skipped when the deadline is near."""
    from transformers import AutoTokenizer

    from openjev_batch.model_info import model_info
    from openjev_batch.pipeline.plan import plan

    if left() < 120:  # engine start + warm-up alone take ~1-2 min
        res[key] = {"skipped": f"deadline: {round(left())} s left"}
        bg.log(key, "skipped", res[key])
        bg.save(res)
        return
    tok = AutoTokenizer.from_pretrained(model_dir)
    info = model_info(str(model_dir))
    backend, start_s = bg.start_sglang_defaults(model_dir, **extra)
    r = res[key] = {
        "model": info.describe(),
        "engine_start_s": start_s,
        "engine_kwargs": {k: str(v) for k, v in backend.engine_kwargs_used.items()},
        "state_budget": str(backend.state_budget),
        "pattern": backend.pattern,
        "moe_config_dir": backend.moe_config_dir or os.environ.get("SGLANG_MOE_CONFIG_DIR"),
        "kv_capacity_tokens": backend.kv_capacity_tokens,
    }
    try:
        si = backend.engine.get_server_info()
        st = (si.get("internal_states") or [{}])[0]
        r["engine_state_info"] = {
            k: st.get(k)
            for k in st
            if "mamba" in k or "openjev" in k or "running" in k or k in ("max_total_num_tokens",)
        }
    except Exception as e:  # informational only
        r["engine_state_info"] = repr(e)
    bg.log(key, "engine start", start_s, r["state_budget"], r["pattern"])
    bg.save(res)
    try:
        t = time.perf_counter()
        bg.warm(backend, {"w1": wls["warm"]})
        r["warm_s"] = round(time.perf_counter() - t, 1)
        bg.log(key, "warm", r["warm_s"])
        for name, what in plan_items:
            need = 20 if name.startswith("w1_64") else 40 if name.startswith("w1") else 90
            need = 5 if what == "compare" else need
            if left() < need:
                r.setdefault("skipped", []).append(f"{name}:{what}")
                bg.log(key, "skip", name, what, "left", round(left()))
                continue
            x = r.setdefault(name, {})
            if "unique_tokens" not in x:
                prompts = bg.prompts_for(tok, *wls[name])
                x["unique_tokens"] = sum(w.unique_tokens for w in plan(prompts, 1 << 40, 1 << 40))
                if info.active_params:
                    x["active_params"] = info.active_params
                    x["roofline_s"] = round(
                        2 * info.active_params * x["unique_tokens"] / (bg.PEAK_TFLOPS * 1e12), 3
                    )
            out = bg.WORK / f"{key.replace('/', '_')}_{name}_{what}.parquet"
            if what in ("product", "today"):
                x[what] = product(backend, wls[name], out, what)
            elif what.startswith("ochunk:"):
                x[what] = chunked(
                    backend.engine, bg.prompts_for(tok, *wls[name]), int(what[7:]), overlap=True
                )
            elif what.startswith("chunk:"):
                c = what.split(":")[1]
                x[what] = chunked(
                    backend.engine, bg.prompts_for(tok, *wls[name]), None if c == "all" else int(c)
                )
            elif what == "compare":
                a = bg.WORK / f"{key.replace('/', '_')}_{name}_product.parquet"
                b = bg.WORK / f"{key.replace('/', '_')}_{name}_today.parquet"
                if not ("product" in x and "today" in x):  # one of them was skipped (deadline)
                    continue
                x[what] = compare(a, b)
            if isinstance(x.get(what), dict) and "s" in x[what] and x.get("roofline_s"):
                x[what]["pct_roofline"] = round(100 * x["roofline_s"] / x[what]["s"], 1)
            if what == "product" and "today" in x or what == "today" and "product" in x:
                x["speedup_vs_today"] = round(x["today"]["s"] / x["product"]["s"], 2)
            bg.log(key, name, what, x.get(what))
            bg.save(res)
    finally:
        backend.close()
        import torch

        if torch.cuda.is_available():  # the device machine is ours alone: no leftover engine processes
            os.system('pkill -9 -f "[s]glang::" >/dev/null 2>&1')


CLS35_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction"}
# res key -> (moe, architectures written to config.json or None for the class's own, M-RoPE rope_parameters)
CLS35_MODELS = {
    "hybrid/qwen3.5-cls-tiny": (False, None, False),  # transformers' Qwen3_5ForSequenceClassification
    "hybrid/qwen3.5-moe-cls-tiny": (True, None, False),  # the product's Qwen3_5MoeForSequenceClassification
    # the seeds' form: the multimodal architecture name with a score head, and the family's interleaved M-RoPE
    "hybrid/qwen3.5-cls-tiny-mm": (False, "Qwen3_5ForConditionalGeneration", True),
}


def build_cls35(d: Path, moe: bool, architecture: str | None = None, mrope: bool = False) -> str:
    """A tiny random bf16 Qwen3.5 classifier (multimodal config: 4 text layers, 3 Gated DeltaNet + 1 full
    attention, hidden 256; `moe`: 8 experts top-2, 128 wide, a 128 shared expert) saved by transformers with
    the tokenizer files only (no preprocessor_config.json, as fine-tuned checkpoints often ship). Returns the
    class that saved it."""
    import torch
    from transformers import AutoModelForSequenceClassification, Qwen3_5Config, Qwen3_5MoeConfig

    d.mkdir(parents=True, exist_ok=True)
    for f in bg.tokenizer_dir().iterdir():
        shutil.copy(f, d)
    text = dict(
        vocab_size=151936,
        hidden_size=256,
        num_hidden_layers=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        full_attention_interval=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        max_position_embeddings=40960,
    )
    if mrope:  # the real checkpoints' layout, scaled: rotary dims 64 × 0.25 = 16 → 8 pairs = 3 + 3 + 2
        text["rope_parameters"] = dict(
            rope_type="default",
            rope_theta=10_000_000,
            partial_rotary_factor=0.25,
            mrope_section=[3, 3, 2],
            mrope_interleaved=True,
        )
    vision = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=2, out_hidden_size=256)
    kw = dict(
        vision_config=vision,
        num_labels=3,
        id2label=CLS35_LABELS,
        label2id={v: k for k, v in CLS35_LABELS.items()},
        pad_token_id=151643,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    if moe:
        from openjev_batch.backends.hf.qwen3_5_moe_cls import Qwen3_5MoeForSequenceClassification

        text.update(
            moe_intermediate_size=128,
            shared_expert_intermediate_size=128,
            num_experts=8,
            num_experts_per_tok=2,
        )
        m = Qwen3_5MoeForSequenceClassification(Qwen3_5MoeConfig(text_config=text, **kw))
    else:
        text.update(intermediate_size=512)
        m = AutoModelForSequenceClassification.from_config(Qwen3_5Config(text_config=text, **kw))
    # A random score head gives logits of about ±0.3, where bf16 noise flips near-tied argmaxes; ×30 makes
    # the logits (and their differences) ~±10, so the argmax agreement measures the engines, not ties.
    with torch.no_grad():
        m.score.weight.mul_(30.0)
    m = m.to(torch.bfloat16)
    m.save_pretrained(d, safe_serialization=True)
    saved_by = type(m).__name__
    del m
    if architecture:  # after saving: save_pretrained writes the class's own name
        c = json.loads((d / "config.json").read_text())
        c["architectures"] = [architecture]
        (d / "config.json").write_text(json.dumps(c, indent=2))
    assert not (d / "preprocessor_config.json").exists()
    return saved_by


def stage_cls35(res: dict) -> None:
    """Tiny random Qwen3.5 classifiers (CLS35_MODELS: dense, MoE, and the dense one in the seeds' form)
    through `classify` with hf and with sglang (our registered heads, backends/sglang/heads/qwen3_5_cls.py
    and qwen3_5_moe_cls.py; text only: enable_multimodal=False), bf16 on the GPU: start ok, rows, max
    |Δ logit| and argmax agreement on NLI pairs, per model."""
    import classify_gpu as cg

    src = bg.WORK / "cls35.jsonl"
    n = cg.workload(src, 16, 8)  # 16 premises × 8 hypotheses: 128 NLI pairs
    for key, (moe, arch, mrope) in CLS35_MODELS.items():
        if left() < 90:
            res[key] = {"skipped": "deadline"}
            bg.save(res)
            continue
        d = bg.WORK / key.split("/")[1]
        r = res[key] = {"moe": moe, "architectures": arch, "mrope": mrope}
        try:
            if not (d / "config.json").exists():
                r["saved_by"] = build_cls35(d, moe, arch, mrope)
        except Exception as e:
            r["build"] = f"failed: {type(e).__name__}: {str(e)[:1500]}"
            bg.save(res)
            continue
        cls35_parity(key, d, src, n, r)
        bg.save(res)


def cls35_parity(key: str, d: Path, src: Path, n: int, r: dict) -> None:
    """hf then sglang on `d` over the workload `src` (n rows): r[backend] = start/run outcome, r["parity"]."""
    import pyarrow.parquet as pq

    from openjev_batch.backends import BackendOptions, load_backend
    from openjev_batch.config import build_config
    from openjev_batch.pipeline.job import run_job

    outs = {}
    tag = key.split("/")[1]
    for name in ("hf", "sglang"):
        if left() < 60:
            r["skipped"] = name
            break
        kit = (
            dict(attention_backend="triton", engine_args={"disable_cuda_graph": True})
            if name == "sglang"
            else {}
        )
        t = time.perf_counter()
        try:
            b = load_backend(
                name, BackendOptions(model=str(d), device="cuda", dtype="bfloat16", **kit), "classifier-head"
            )
        except Exception as e:
            r[name] = f"failed to start: {type(e).__name__}: {str(e)[:1500]}"
            bg.log("cls35", tag, name, r[name])
            continue  # the other backend still runs: a start failure is the finding
        r[f"{name}_start_s"] = round(time.perf_counter() - t, 1)
        try:
            out = bg.WORK / f"cls35-{tag}-{name}.parquet"
            cfg = build_config(
                input=src, output=out, model=str(d), backend=b.name, readout="classifier-head", progress=False
            )
            s = run_job(cfg, backend=b)
            r[name] = {"started": True, "rows": n, "errors": s.errors, "s": round(time.perf_counter() - t, 1)}
            outs[name] = pq.read_table(out).to_pylist()
        except Exception as e:
            r[name] = f"started, then failed: {type(e).__name__}: {str(e)[:1500]}"
        finally:
            b.close()
        bg.log("cls35", tag, name, r[name])
    if len(outs) == 2:
        a, b2 = outs["hf"], outs["sglang"]
        ok = [(p, q) for p, q in zip(a, b2, strict=True) if p["logits"] and q["logits"]]
        r["parity"] = {
            "rows_compared": len(ok),
            "max_abs_dlogit": max(
                (abs(x - y) for p, q in ok for x, y in zip(p["logits"], q["logits"], strict=True)),
                default=None,
            ),
            "argmax_agreement": sum(p["label"] == q["label"] for p, q in ok) / len(ok) if ok else None,
        }
        bg.log("cls35 parity", tag, r["parity"])


def main() -> None:
    import torch

    bg.WORK.mkdir(parents=True, exist_ok=True)
    bg.OUT.mkdir(parents=True, exist_ok=True)
    res: dict = {}
    stages = sys.argv[1:] or ["35b", "30b", "35b-stock-moe", "cls35"]
    try:
        import triton

        res["hybrid/meta"] = {"triton": triton.__version__, "gpu": torch.cuda.get_device_name(0)}
    except Exception:
        pass
    if all(s == "cls35" for s in stages):  # the classifiers need neither the 35B config nor the workloads
        stage_cls35(res)
        return
    from transformers import AutoTokenizer

    m35 = model_35b(bg.WORK / "qwen3.5-35b-a3b")
    tok = AutoTokenizer.from_pretrained(m35)
    w3n = int(os.environ.get("W3_ROWS", "5000"))
    wls = build_workloads(tok, bg.WORK / "hwl", w3_rows=w3n)
    warm = bg.WORK / "hwl" / "warm"
    warm.mkdir(exist_ok=True)
    (warm / "w1.jsonl").write_text("".join(open(wls["w1_64"][0]).readlines()[:16]))
    wls["warm"] = (warm / "w1.jsonl", wls["w1_64"][1])
    bg.log("workloads built", round(time.time() - T0, 1), "s")
    dummy = {"load_format": "dummy"}
    w3 = f"w3_{w3n}"
    for stage in stages:
        if stage == "35b":
            items = [
                ("w1_64", w) for w in ("product", "today", "compare", "chunk:all", "chunk:32", "chunk:8")
            ]
            items += [("w1_256", "product"), ("w1_256", "today"), ("w1_256", "compare")]
            items += [(w3, "product"), (w3, "today"), (w3, "compare")]
            bench_engine("hybrid/35b-a3b", m35, wls, items, dummy, res)
        elif stage == "35b-quick":  # the second call: the product's one-group-at-a-time schedule vs today's
            items = [("w1_64", w) for w in ("product", "today", "compare", "chunk:8")] + [
                ("w1_256", "product")
            ]
            bench_engine("hybrid/35b-a3b-depth1", m35, wls, items, dummy, res)
        elif stage == "35b-run4":  # the overlapped schedule (next group's prefixes beside a group's branches)
            items = [("w1_64", w) for w in ("product", "today", "compare", "chunk:8", "ochunk:7")]
            items += [("w1_256", "product"), (w3, "product"), (w3, "today"), (w3, "compare")]
            bench_engine("hybrid/35b-a3b-overlap", m35, wls, items, dummy, res)
        elif stage == "35b-stock-moe":
            # the same engine with sglang's own configs only (its default kernel config for E=256, N=512)
            from openjev_batch.backends.sglang import moe_configs

            root = moe_configs.sglang_config_root()
            os.environ[moe_configs.ENV] = str(root)
            try:
                bench_engine(
                    "hybrid/35b-a3b-stock-moe-config",
                    m35,
                    wls,
                    [("w1_64", "product"), ("w1_256", "product")],
                    dummy,
                    res,
                )
            finally:
                os.environ.pop(moe_configs.ENV, None)
        elif stage == "cls35":
            stage_cls35(res)
        elif stage == "30b":
            m30 = model_30b(bg.WORK / "qwen3-30b-a3b")
            items = [("w1_256", "product"), ("w1_256", "today"), ("w1_256", "compare")]
            bench_engine("hybrid/30b-a3b", m30, wls, items, dummy, res)
        bg.log("stage", stage, "done at", round(time.time() - T0, 1), "s")


def cpu_smoke() -> None:
    """Every code path above on the CPU: the tiny dense Qwen3 on sglang's CPU engine, the hybrid pattern
    forced with --request-pattern prefix-first (the CPU build cannot run Gated DeltaNet)."""
    global PRODUCT_PATTERN
    import tempfile

    sys.path.insert(0, str(bg.ROOT / "tests"))
    from conftest import SHIMS, sglang_cpu_env
    from tiny import make_tiny_qwen3
    from transformers import AutoTokenizer

    from openjev_batch.backends import BackendOptions, load_backend
    from openjev_batch.packaged_models import qwen3_tokenizer_dir

    os.environ.update(sglang_cpu_env())
    sys.path.insert(0, str(SHIMS))
    tmp = Path(tempfile.mkdtemp())
    m = make_tiny_qwen3(qwen3_tokenizer_dir(), tmp / "tiny")
    tok = AutoTokenizer.from_pretrained(m)
    wls = build_workloads(tok, tmp / "wl", rows_w1=(8,), w3_rows=20)
    wls["w1_64"] = wls["w1_8"]
    PRODUCT_PATTERN = "prefix-first"
    # max_running_requests 20: a dense engine's state budget is its running slots × 3 = 60 (as the old forced
    # StateBudget(60)), so W1's 8 rows run as several groups
    engine_args = {"max_total_tokens": 200_000, "max_running_requests": 20}
    opts = BackendOptions(
        model=str(m), device="cpu", engine_args=engine_args, request_pattern=PRODUCT_PATTERN
    )
    b = load_backend("sglang", opts)
    b.engine_kwargs_used = {}
    res: dict = {}
    orig = bg.start_sglang_defaults
    bg.start_sglang_defaults = lambda *a, **k: (b, 0.0)
    try:
        items = [("w1_8", w) for w in ("product", "today", "compare", "chunk:all", "chunk:2", "ochunk:2")]
        items += [("w3_20", "product"), ("w3_20", "today"), ("w3_20", "compare")]
        wls["warm"] = wls["w1_8"]
        bench_engine("smoke/tiny", m, wls, items, {}, res)
    finally:
        bg.start_sglang_defaults = orig
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cpu-smoke"]:
        bg.WORK = Path(os.environ.get("WORK", "/tmp/bench-smoke"))
        bg.OUT = bg.WORK / "out"
        bg.WORK.mkdir(parents=True, exist_ok=True)
        cpu_smoke()
    else:
        main()
