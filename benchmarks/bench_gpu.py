"""H200 benchmark and parity run for openjev-batch (sglang 0.5.17 kit from ../shared/gpu).

Run on the device machine through `benchmarks/gpu.sh STAGE...` (it installs the kit and sets the env).
Stages (results merge into $OUT/results.json and /tmp/bench/results.json across calls):
  parity  CLI `openjev-batch run` with -b sglang and -b hf on the same random 0.6B-shaped bf16 weights and
          the real Qwen3 tokenizer (32 W1 rows); max |Δ label logprob| via the library on the same window.
  small   Qwen3-0.6B shape: W1 through the product vs naive N+1 / one-call / transformers batched; W2; W3.
  big     Qwen3-8B shape (load_format=dummy): W1 through the product vs naive N+1.
Timings exclude engine start (reported separately); the product's time is run_job end to end:
read → render → tokenize → plan → prefill → read out → write Parquet.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
# SMOKE=1: the issue19 stage's plumbing on a CPU (tiny random Qwen3, sglang's CPU engine, small workloads);
# it checks the stage runs end to end, not any number.
SMOKE = os.environ.get("SMOKE") == "1"
WORK = Path(os.environ.get("BENCH_WORK", "/tmp/bench"))
OUT = Path(os.environ.get("OUT", "/tmp/out"))
PEAK_TFLOPS = 788.0  # measured bf16 matmul rate on this H200 (../shared/gpu/README.md)
ENGINE_ARGS = {"sampling_backend": "pytorch", "disable_cuda_graph": True}  # no decode: graphs buy nothing
SHAPES = {
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    ),
    "qwen3-8b": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
    ),
}


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def save(results: dict) -> None:
    p = WORK / "results.json"
    old = json.loads(p.read_text()) if p.exists() else {}
    old.update(results)
    p.write_text(json.dumps(old, indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copy(p, OUT / "results.json")


def tokenizer_dir() -> Path:
    d = WORK / "tok"
    if not (d / "tokenizer.json").exists():
        d.mkdir(parents=True, exist_ok=True)
        src = ROOT / ".gpu" / "tok"
        if not src.exists():
            src = Path("/tmp/chunks/tok")
        shutil.copy(src / "tokenizer_config.json", d)
        with gzip.open(src / "tokenizer.json.gz", "rb") as f, open(d / "tokenizer.json", "wb") as g:
            shutil.copyfileobj(f, g)
    return d


def make_model(shape: str, weights: bool) -> Path:
    """A random Qwen3-shaped model folder with the real tokenizer; weights saved (bf16) or config only."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    d = WORK / shape
    if (d / "config.json").exists():
        return d
    if SMOKE:
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny import make_tiny_qwen3

        from openjev_batch.packaged_models import qwen3_tokenizer_dir

        return make_tiny_qwen3(qwen3_tokenizer_dir(), d)
    d.mkdir(parents=True, exist_ok=True)
    tok_dir = tokenizer_dir()
    for f in tok_dir.iterdir():
        shutil.copy(f, d)
    tok = AutoTokenizer.from_pretrained(d)
    cfg = Qwen3Config(
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1000000,
        rms_norm_eps=1e-6,
        tie_word_embeddings=shape == "qwen3-0.6b",
        torch_dtype="bfloat16",
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        **SHAPES[shape],
    )
    if weights:
        torch.manual_seed(0)
        with torch.device("cuda"):
            m = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
        m.save_pretrained(d)
        del m
        torch.cuda.empty_cache()
    else:
        cfg.architectures = ["Qwen3ForCausalLM"]
        cfg.save_pretrained(d)
    return d


def non_embedding_params(shape: str) -> int:
    s = SHAPES[shape]
    h, i, n, q, kv, hd = (
        s[k]
        for k in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
        )
    )
    attn = h * q * hd + 2 * h * kv * hd + q * hd * h
    return n * (attn + 3 * h * i)


def roofline_s(shape: str, unique_tokens: int) -> float:
    """2 × non-embedding params × unique tokens / peak (attention FLOPs left out: short contexts)."""
    return 2 * non_embedding_params(shape) * unique_tokens / (PEAK_TFLOPS * 1e12)


def attention_flops(shape: str, prompts) -> float:
    """Causal attention FLOPs of the unique work: each distinct prefix once, each branch's suffix against
    its prefix; 4 × layers × q heads × head_dim per (query, key) pair (QKᵀ and PV, 2 FLOPs a MAC)."""
    s = SHAPES[shape]
    per_pair = 4 * s["num_hidden_layers"] * s["num_attention_heads"] * s["head_dim"]
    pairs, seen = 0, set()
    for rp in prompts:
        p = len(rp.prefix)
        if rp.prefix not in seen:
            seen.add(rp.prefix)
            pairs += p * (p + 1) // 2
        for b in rp.branches:
            n = len(b.suffix)
            pairs += n * p + n * (n + 1) // 2
    return float(per_pair * pairs)


def roofline_attn_s(shape: str, unique_tokens: int, prompts) -> float:
    """The issue's roofline: 2 × non-embedding params × unique tokens + attention FLOPs, over the peak."""
    return roofline_s(shape, unique_tokens) + attention_flops(shape, prompts) / (PEAK_TFLOPS * 1e12)


def workloads(tok, names=("w1", "w2", "w3")) -> dict:
    """Workload files under /tmp/bench/wl, each built on first use (W1 ~2 s, W2/W3 ~15 s each)."""
    import workloads as wl

    d = WORK / "wl"
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        if not (d / f"{name}.jsonl").exists():
            t = time.time()
            getattr(wl, name)(tok, d)
            log("workload", name, "built", round(time.time() - t, 1), "s")
    return {
        "w1": (d / "w1.jsonl", d / "w1_questions.json"),
        "w2": (d / "w2.jsonl", None),
        "w3": (d / "w3.jsonl", d / "w3_questions.json"),
    }


def prompts_for(tok, path, qpath):
    """The product's own branch ids for a workload (for the baselines: identical tokens)."""
    from openjev_batch.config import load_questions
    from openjev_batch.pipeline.read import read_rows
    from openjev_batch.readouts.label_logprobs.prompt import Prompter

    pr = Prompter(tok)
    rows = [r for c in read_rows(path, load_questions(qpath) if qpath else None) for r in c]
    return [rp for rp, _ in pr.build_many(rows) if rp is not None]


def run_product(backend, path, qpath, out, **options) -> dict:
    """The product end to end (`run_job`) on a started backend; `options`: documented run options
    (e.g. chunk_rows = --chunk-rows)."""
    from openjev_batch.config import build_config
    from openjev_batch.pipeline.job import run_job

    cfg = build_config(
        input=path, output=out, model="-", backend="sglang", questions_file=qpath, progress=False, **options
    )
    t = time.perf_counter()
    done = [0]

    def tick(branches: int, tokens: int) -> None:
        done[0] += branches
        log(f"  {done[0]} branches, {time.perf_counter() - t:.1f} s")

    s = run_job(cfg, backend=backend, on_progress=tick)
    wall = time.perf_counter() - t
    return {
        "s": round(wall, 3),
        "rows": s.rows,
        "questions": s.questions,
        "errors": s.errors,
        "logical_tokens": s.branch_tokens,
        "computed_tokens": s.computed_tokens,
        "cache_hit_rate": round(s.cache_hit_rate, 4),
        "pattern": s.pattern,
        **options,
    }


@contextlib.contextmanager
def profiled(name: str):
    """py-spy (if carried: /tmp/pyspy/bin/py-spy) samples this process and its engine subprocesses
    while the block runs; collapsed stacks → $OUT/<name>.prof.gz (read with benchmarks/prof_summary.py)."""
    exe = Path("/tmp/pyspy/bin/py-spy")
    if not exe.exists():
        yield
        return
    raw = WORK / f"{name}.prof"
    p = subprocess.Popen(
        [
            str(exe),
            "record",
            "--pid",
            str(os.getpid()),
            "--subprocesses",
            "--nonblocking",
            "-r",
            "200",
            "-f",
            "raw",
            "-o",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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


def flush(engine) -> None:
    """Empty the radix cache; sglang refuses while requests are still being retired, so retry."""
    for _ in range(100):
        r = engine.flush_cache()
        if getattr(r, "success", True):
            return
        time.sleep(0.05)
    raise RuntimeError("radix cache could not be flushed")


def naive(engine, prompts, one_call=False) -> dict:
    """The baseline the issue names: every prefix in one generate call, then every branch in one call
    (max_new_tokens=0), token ids as the product builds them. `one_call`: branches only, no warm-up."""
    pre = {rp.prefix: list(rp.branches[0].label_ids) for rp in prompts}
    ids = [list(rp.prefix + b.suffix) for rp in prompts for b in rp.branches]
    labels = [list(b.label_ids) for rp in prompts for b in rp.branches]

    def gen(i, lab):
        return engine.generate(
            input_ids=i,
            sampling_params={"max_new_tokens": 0, "temperature": 0},
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=lab,
        )

    flush(engine)
    t = time.perf_counter()
    if not one_call:
        gen([list(p) for p in pre], list(pre.values()))
    outs = gen(ids, labels)
    dt = time.perf_counter() - t
    cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
    return {"s": round(dt, 3), "branches": len(ids), "cached_tokens": cached}


def hf_batched(model_dir, prompts, bs=64) -> dict:
    """transformers baseline: every branch padded in batches of 64, logits_to_keep=1, no prefix reuse."""
    import torch
    from transformers import AutoModelForCausalLM

    if (Path(model_dir) / "model.safetensors").exists() or any(Path(model_dir).glob("*.safetensors")):
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
    else:  # config only (8B shape): random init straight on the GPU, like load_format=dummy
        from transformers import AutoConfig

        with torch.device("cuda"):
            m = AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(model_dir), dtype=torch.bfloat16
            ).eval()
    flat = [(rp.prefix + b.suffix, b.label_ids) for rp in prompts for b in rp.branches]
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(flat), bs):
            chunk = flat[i : i + bs]
            n = max(len(x) for x, _ in chunk)
            ids = torch.zeros(len(chunk), n, dtype=torch.long, device="cuda")
            att = torch.zeros_like(ids)
            for j, (x, _) in enumerate(chunk):  # left padding: the last position is real for every row
                ids[j, n - len(x) :] = torch.tensor(x)
                att[j, n - len(x) :] = 1
            lp = torch.log_softmax(
                m(input_ids=ids, attention_mask=att, logits_to_keep=1).logits[:, -1].float(), -1
            )
            lp.gather(1, torch.tensor([list(lab) for _, lab in chunk], device="cuda")).cpu()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    del m
    torch.cuda.empty_cache()
    return {"s": round(dt, 3), "branches": len(flat)}


def start_sglang(model_dir, **extra):
    from openjev_batch.backends import BackendOptions, load_backend

    t = time.perf_counter()
    b = load_backend(
        "sglang",
        BackendOptions(
            model=str(model_dir),
            device="cuda",
            attention_backend="triton",
            mem_fraction_static=0.8,
            engine_args={**ENGINE_ARGS, **extra},
        ),
    )
    return b, round(time.perf_counter() - t, 1)


def cli(*args) -> tuple[int, float, str]:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "openjev_batch", *map(str, args)], capture_output=True, text=True
    )
    return r.returncode, round(time.perf_counter() - t, 1), (r.stdout + r.stderr)[-2500:]


def stage_parity() -> None:
    """The product's CLI with both backends on the same bf16 weights; compare label logprobs."""
    import math

    import pyarrow.parquet as pq

    m = make_model("qwen3-0.6b", weights=True)
    from transformers import AutoTokenizer

    w = workloads(AutoTokenizer.from_pretrained(m))
    sub = WORK / "w1_32.jsonl"
    sub.write_text("".join(open(w["w1"][0]).readlines()[:32]))
    common = [sub, "-q", w["w1"][1], "-m", m, "--no-progress", "--dtype", "bfloat16"]
    rc_h, t_h, log_h = cli("run", *common, "-b", "hf", "--device", "cuda", "-o", WORK / "hf.parquet")
    rc_s, t_s, log_s = cli(
        "run",
        *common,
        "-b",
        "sglang",
        "--attention-backend",
        "triton",
        "--mem-fraction-static",
        "0.8",
        "--engine-arg",
        "sampling_backend=pytorch",
        "--engine-arg",
        "disable_cuda_graph=true",
        "-o",
        WORK / "sg.parquet",
    )
    log("hf cli", rc_h, t_h, log_h[-800:])
    log("sglang cli", rc_s, t_s, log_s[-800:])
    res = {"hf_cli": {"rc": rc_h, "s": t_h}, "sglang_cli": {"rc": rc_s, "s": t_s}}
    if rc_h == 0 and rc_s == 0:
        a, b = pq.read_table(WORK / "hf.parquet").to_pylist(), pq.read_table(WORK / "sg.parquet").to_pylist()
        # raw label logprob = log P_i (renormalised) + log label_mass
        d = [
            abs(math.log(p) + math.log(x["label_mass"]) - math.log(q) - math.log(y["label_mass"]))
            for x, y in zip(a, b, strict=True)
            for p, q in zip(x["probs"], y["probs"], strict=True)
        ]
        agree = sum(x["answer"] == y["answer"] for x, y in zip(a, b, strict=True)) / len(a)
        res["parity"] = {
            "branches": len(a),
            "max_abs_logprob_diff": max(d),
            "mean_abs_logprob_diff": sum(d) / len(d),
            "answer_agreement": agree,
            "cached_tokens_sglang": sum(y["cached_tokens"] for y in b),
            "prefix_tokens": sum(y["prefix_tokens"] for y in b),
        }
        log("parity", res["parity"])
    (OUT / "parity_cli.log").write_text(f"== hf ==\n{log_h}\n== sglang ==\n{log_s}\n")
    save(res)


def bench_shape(shape: str, names: list[str], baselines: bool) -> None:
    from transformers import AutoTokenizer

    weights = shape == "qwen3-0.6b"
    m = make_model(shape, weights=weights)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok)
    extra = {} if weights else {"load_format": "dummy"}
    backend, start_s = start_sglang(m, **extra)
    res: dict = {f"{shape}/engine_start_s": start_s}
    log(shape, "engine start", start_s)
    try:
        # warm up kernels (triton autotune, flashinfer JIT) on a small slice, outside the timings
        warm(backend, w)
        for name in names:
            path, q = w[name]
            t = time.perf_counter()
            prompts = prompts_for(tok, path, q)
            host = time.perf_counter() - t
            from openjev_batch.pipeline.plan import plan

            unique = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
            flush(backend.engine)
            prod = run_product(backend, path, q, WORK / f"{name}.parquet")
            r = {
                "product": prod,
                "host_prompt_s": round(host, 3),
                "unique_tokens": unique,
                "roofline_s": round(roofline_s(shape, unique), 3),
            }
            log(shape, name, "product", prod, "host", round(host, 2), "unique", unique)
            if baselines:
                r["naive_n_plus_1"] = naive(backend.engine, prompts)
                log(shape, name, "naive N+1", r["naive_n_plus_1"])
                if name == "w1":
                    r["one_call"] = naive(backend.engine, prompts, one_call=True)
                    log(shape, name, "one call", r["one_call"])
            res[f"{shape}/{name}"] = r
            save(res)
    finally:
        backend.close()
    if weights and baselines and "w1" in names:
        prompts = prompts_for(tok, *w["w1"])
        res[f"{shape}/w1"]["transformers_batched"] = hf_batched(m, prompts)
        log(shape, "w1 transformers", res[f"{shape}/w1"]["transformers_batched"])
        save(res)


def warm(backend, w: dict) -> None:
    """Kernels (Triton autotune, flashinfer JIT) warmed on 32 W1 rows, outside every timing."""
    sub = WORK / "w1_32.jsonl"
    sub.write_text("".join(open(w["w1"][0]).readlines()[:32]))
    run_product(backend, sub, w["w1"][1], WORK / "warm.parquet")


def sweep(backend, res: dict, r: dict, label: str, paths, out: Path, shapes, prefix: str = "") -> None:
    """The product on one workload for each pipeline shape (groups per window, depth), cache flushed
    before each; results in r[f"{prefix}product_g{groups}_d{depth}"], saved after each."""
    for groups, depth in shapes:
        flush(backend.engine)
        k = f"{prefix}product_g{groups}_d{depth}"
        r[k] = run_product(backend, *paths, out, groups_per_window=groups, pipeline_depth=depth)
        log(label, k, r[k])
        save(res)


def stage_prof(knobs: dict | None = None, tag: str = "") -> None:
    """0.6B: W1 through the product with the pipeline off (1 group) and on (groups × depth variants),
    naive N+1 on the same ids, W1 and W2 product runs under py-spy; `knobs`: extra engine args."""
    from transformers import AutoTokenizer

    shape = "qwen3-0.6b"
    m = make_model(shape, weights=True)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok)
    backend, start_s = start_sglang(m, **(knobs or {}))
    key = f"{shape}/prof{tag}"
    res: dict = {key: {"engine_start_s": start_s, "knobs": knobs or {}}}
    r = res[key]
    try:
        warm(backend, w)
        prompts = prompts_for(tok, *w["w1"])
        variants = [(1, 1), (8, 2), (4, 2), (16, 2), (16, 3)] if not knobs else [(1, 1), (8, 2)]
        sweep(backend, res, r, key, w["w1"], WORK / "w1.parquet", variants, prefix="w1_")
        r["w1_naive_n_plus_1"] = naive(backend.engine, prompts)
        log(key, "w1 naive", r["w1_naive_n_plus_1"])
        save(res)
        if not knobs:  # the default pipeline, 8 groups × 2 in flight
            flush(backend.engine)
            with profiled("w1_product"):
                r["w1_product_profiled"] = run_product(backend, *w["w1"], WORK / "w1.parquet")
            flush(backend.engine)
            with profiled("w1_naive"):
                r["w1_naive_profiled"] = naive(backend.engine, prompts)
            save(res)
        for groups, depth in [(1, 1), (8, 2)]:
            flush(backend.engine)
            ctx = (
                profiled("w2_product")
                if (groups, depth) == (8, 2) and not knobs
                else contextlib.nullcontext()
            )
            with ctx:
                r[f"w2_product_g{groups}_d{depth}"] = run_product(
                    backend, *w["w2"], WORK / "w2.parquet", groups_per_window=groups, pipeline_depth=depth
                )
            log(key, "w2 product", groups, depth, r[f"w2_product_g{groups}_d{depth}"])
            save(res)
        if not knobs:
            r["w2_naive_n_plus_1"] = naive(backend.engine, prompts_for(tok, *w["w2"]))
            log(key, "w2 naive", r["w2_naive_n_plus_1"])
            save(res)
    finally:
        backend.close()


def stage_big() -> None:
    """8B shape, W1: the product with the pipeline off and on, naive N+1."""
    from transformers import AutoTokenizer

    shape = "qwen3-8b"
    m = make_model(shape, weights=False)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok)
    backend, start_s = start_sglang(m, load_format="dummy")
    key = f"{shape}/w1-pipeline"
    res: dict = {key: {"engine_start_s": start_s}}
    r = res[key]
    try:
        warm(backend, w)
        prompts = prompts_for(tok, *w["w1"])
        unique = sum(
            x.unique_tokens
            for x in __import__("openjev_batch.pipeline.plan", fromlist=["plan"]).plan(
                prompts, 1 << 40, 1 << 40
            )
        )
        r["unique_tokens"], r["roofline_s"] = unique, round(roofline_s(shape, unique), 3)
        sweep(backend, res, r, key, w["w1"], WORK / "w1.parquet", [(8, 2), (1, 1), (16, 2)])
        r["naive_n_plus_1"] = naive(backend.engine, prompts)
        log(key, "naive", r["naive_n_plus_1"])
        save(res)
        flush(backend.engine)
        with profiled("w1_8b_product"):  # the default pipeline, 8 × 2
            r["product_profiled"] = run_product(backend, *w["w1"], WORK / "w1.parquet")
        save(res)
    finally:
        backend.close()


def stage_final(shape: str) -> None:
    """The product with its own defaults (engine: only the kit's sampling backend added) against the
    baselines in one engine: pipeline shape sweep on W1 (the best is reported as the product), naive N+1,
    W2 and W3 (0.6B), transformers batched (no reuse) after the engine is closed."""
    from transformers import AutoTokenizer

    from openjev_batch.pipeline.plan import plan

    weights = shape == "qwen3-0.6b"
    m = make_model(shape, weights=weights)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok)
    backend, start_s = start_sglang_defaults(m, **({} if weights else {"load_format": "dummy"}))
    key = f"{shape}/final"
    res: dict = {key: {"engine_start_s": start_s, "engine_kwargs": backend.engine_kwargs_used}}
    r = res[key]
    try:
        warm(backend, w)
        names = ["w1", "w2", "w3"] if weights else ["w1"]
        for name in names:
            t = time.perf_counter()
            prompts = prompts_for(tok, *w[name])
            host = time.perf_counter() - t
            unique = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
            x = r[name] = {
                "host_prompt_s": round(host, 3),
                "unique_tokens": unique,
                "roofline_s": round(roofline_s(shape, unique), 3),
            }
            shapes = [(1, 1), (8, 2), (16, 3), (32, 4)] if name == "w1" else [(8, 2)]
            sweep(backend, res, x, f"{key} {name}", w[name], WORK / f"{name}.parquet", shapes)
            x["naive_n_plus_1"] = naive(backend.engine, prompts)
            log(key, name, "naive", x["naive_n_plus_1"])
            if name == "w1" and not weights and os.environ.get("ONE_CALL"):
                x["one_call"] = naive(backend.engine, prompts, one_call=True)
                log(key, name, "one call", x["one_call"])
            save(res)
    finally:
        backend.close()
    prompts = prompts_for(tok, *w["w1"])
    r["w1"]["transformers_batched"] = hf_batched(m, prompts, bs=64 if weights else 16)
    log(key, "w1 transformers", r["w1"]["transformers_batched"])
    save(res)


def start_sglang_defaults(model_dir, attention: str | None = "triton", patches: str = "all", **extra):
    """The product's own engine defaults (backends.sglang.engine_kwargs) plus what the kit needs;
    `patches`: the documented `--sglang-patches` (the scheduler workarounds installed)."""
    from openjev_batch.backends import BackendOptions, load_backend
    from openjev_batch.backends.sglang.kwargs import engine_kwargs

    if SMOKE:
        extra.pop("load_format", None)
    opts = BackendOptions(
        model=str(model_dir),
        device="cpu" if SMOKE else "cuda",
        attention_backend=None if SMOKE and attention == "triton" else attention,
        engine_args={"sampling_backend": "pytorch", **extra},
        sglang_patches=patches,
    )
    t = time.perf_counter()
    b = load_backend("sglang", opts)
    b.engine_kwargs_used = {k: v for k, v in engine_kwargs(opts).items() if k != "model_path"}
    return b, round(time.perf_counter() - t, 1)


def stage_sync(
    shape: str,
    names: list[str],
    repeats: int = 3,
    attention: str = "triton",
    knobs: dict | None = None,
    tag: str = "",
) -> None:
    """Effect of the sync-free label-logprob gather (backends/sglang/scheduler_patch.py, sglang#39642): the product
    with its own defaults (pipeline 8 × 2) `repeats` times per workload and naive N+1, in an engine with the
    gather and then in one with sglang's stock scheduler; py-spy on one W1 run with the gather (if carried).
    `attention`: the kit's triton, or flashinfer (JIT-compiled with nvcc on first use); `knobs`: extra
    engine args (then, like another attention backend, only the engine with the gather runs)."""
    from transformers import AutoTokenizer

    from openjev_batch.pipeline.plan import plan

    weights = shape == "qwen3-0.6b"
    m = make_model(shape, weights=weights)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok, names)
    extra = ({} if weights else {"load_format": "dummy"}) | (knobs or {})
    tag = tag or ("" if attention == "triton" else f"-{attention}")
    variants = ["sync_free", "stock"] if not tag else ["sync_free"]
    for variant in variants:
        key = f"{shape}/sync{tag}/{variant}"
        # stock: sglang's own scheduler (its label-logprob gather syncs the GPU), `--sglang-patches none`
        patches = "none" if variant == "stock" else "all"
        backend, start_s = start_sglang_defaults(m, attention=attention, patches=patches, **extra)
        res: dict = {key: {"engine_start_s": start_s, "engine_kwargs": backend.engine_kwargs_used}}
        r = res[key]
        log(key, "engine start", start_s)
        try:
            t = time.perf_counter()
            warm(backend, w)
            r["warm_s"] = round(time.perf_counter() - t, 1)
            log(key, "warm", r["warm_s"])
            save(res)
            for name in names:
                prompts = prompts_for(tok, *w[name])
                unique = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
                x = r[name] = {
                    "unique_tokens": unique,
                    "roofline_s": round(roofline_s(shape, unique), 3),
                    "roofline_attn_s": round(roofline_attn_s(shape, unique, prompts), 3),
                    "product": [],
                }
                for i in range(repeats if name == "w1" else 1):
                    flush(backend.engine)
                    x["product"].append(run_product(backend, *w[name], WORK / f"{name}.parquet"))
                    log(key, name, "product", i, x["product"][-1])
                    save(res)
                x["naive_n_plus_1"] = naive(backend.engine, prompts)
                log(key, name, "naive", x["naive_n_plus_1"])
                save(res)
                if name == "w1" and variant == "sync_free" and not tag and not weights:
                    flush(backend.engine)
                    with profiled(f"w1_{shape}_sync_free"):
                        x["product_profiled"] = run_product(backend, *w[name], WORK / f"{name}.parquet")
                    save(res)
        finally:
            backend.close()


def stage_sweep_small() -> None:
    """0.6B W1 with the sync-free gather: naive N+1, the pipeline shapes, naive again, the shapes again
    (interleaved so machine drift shows up in both), each result saved as it lands."""
    from transformers import AutoTokenizer

    shape = "qwen3-0.6b"
    m = make_model(shape, weights=True)
    tok = AutoTokenizer.from_pretrained(m)
    w = workloads(tok, ["w1"])
    backend, start_s = start_sglang_defaults(m)
    key = f"{shape}/sweep-sync-free"
    res: dict = {key: {"engine_start_s": start_s}}
    r = res[key]
    try:
        warm(backend, w)
        prompts = prompts_for(tok, *w["w1"])
        for rep in range(2):
            r[f"naive_{rep}"] = naive(backend.engine, prompts)
            log(key, "naive", rep, r[f"naive_{rep}"])
            save(res)
            shapes = [(1, 1), (2, 2), (4, 2), (8, 2), (16, 3)]
            sweep(backend, res, r, key, w["w1"], WORK / "w1.parquet", shapes, prefix=f"r{rep}_")
    finally:
        backend.close()


def label_logprob_parity(ref_path: Path, new_path: Path) -> dict:
    """Two outputs of the same job: max/mean |Δ raw label logprob| (log P_i + log label_mass), answer
    agreement, and agreement where the reference's top two options are > 0.1 apart in probability."""
    import math

    import pyarrow.parquet as pq

    a, b = pq.read_table(ref_path).to_pylist(), pq.read_table(new_path).to_pylist()
    d, agree, clear, clear_agree, errs = [], 0, 0, 0, 0
    for x, y in zip(a, b, strict=True):
        assert (x["id"], x["question_id"]) == (y["id"], y["question_id"])
        if x["error"] or y["error"]:
            errs += 1
            continue
        d += [
            abs(math.log(p) + math.log(x["label_mass"]) - math.log(q) - math.log(y["label_mass"]))
            for p, q in zip(x["probs"], y["probs"], strict=True)
        ]
        agree += x["answer"] == y["answer"]
        top = sorted(x["probs"], reverse=True)
        if top[0] - top[1] > 0.1:
            clear += 1
            clear_agree += x["answer"] == y["answer"]
    n = len(a) - errs
    return {
        "questions": len(a),
        "errors": errs,
        "max_abs_logprob_diff": round(max(d), 5) if d else None,
        "mean_abs_logprob_diff": round(sum(d) / len(d), 6) if d else None,
        "answer_agreement": round(agree / n, 4) if n else None,
        "clear_questions": clear,
        "clear_answer_agreement": round(clear_agree / clear, 4) if clear else None,
    }


def issue19_workloads(w3_rows: int):
    """0.6B model, tokenizer and the W1/W2/W3 files (W3: its first `w3_rows` tickets), built once."""
    import workloads as wl
    from transformers import AutoTokenizer

    small = make_model("qwen3-0.6b", weights=True)
    tok = AutoTokenizer.from_pretrained(small)
    d = WORK / "wl"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "w1.jsonl").exists():
        wl.w1(tok, d, **({"rows": 40, "prefix_tokens": 120} if SMOKE else {}))
    if not (d / "w2.jsonl").exists():
        wl.w2(tok, d, **({"total": 60, "categories": 3, "shots": 1} if SMOKE else {}))
    w3p = d / f"w3_{w3_rows}.jsonl"
    if not w3p.exists():
        wl.w3(tok, d, rows=w3_rows, **({"ticket_tokens": 40} if SMOKE else {}))
        (d / "w3.jsonl").rename(w3p)
    w = {
        "w1": (d / "w1.jsonl", d / "w1_questions.json"),
        "w2": (d / "w2.jsonl", None),
        "w3": (w3p, d / "w3_questions.json"),
    }
    return small, tok, w


def issue19_parts(key: str, tags: list[str], w3_rows: int, deadline: float) -> None:
    """Engine parts of issue 19, results under results.json[key][tag]. Each part starts one engine with the
    product's defaults plus its engine args (documented `--engine-arg`s) and runs the product (`run_job`)
    on its workloads; a part is skipped when fewer than its estimated seconds remain before `deadline`."""
    from openjev_batch.backends.sglang.kwargs import prefill_graph_args

    small, tok, w = issue19_workloads(w3_rows)
    overlap_rows = {"w2": 2048, "w3": max(500, w3_rows // 5)}
    base = [("w1", "w1", {}), ("w1_again", "w1", {}), ("w2", "w2", {}), ("w3", "w3", {})]
    overlap = [(f"{n}_overlap", n, {"chunk_rows": overlap_rows[n]}) for n in ("w2", "w3")]
    big_runs = [("w1", "w1", {}), ("w1_again", "w1", {})]
    mis = {"attention": "flashinfer", "enable_mis": True}
    # tag: (8B?, estimated seconds, runs, engine args)
    table = {
        "today": (False, 60, [*base, overlap[1]], {}),
        "multi_item": (False, 110, [*base, *overlap, ("w2_profiled", "w2", {})], mis),
        "prefill_graphs": (False, 60, [base[0], base[2], base[3]], prefill_graph_args()),
        "big_multi_item": (True, 60, big_runs, {**mis, "load_format": "dummy"}),
        "big_today": (True, 60, big_runs, {"load_format": "dummy"}),
    }
    res: dict = {key: {}}
    r = res[key]
    for tag in tags:
        is_big, est_s, runs, extra = table[tag]
        left = deadline - time.time()
        if left < est_s:
            r[tag] = {"skipped": f"{left:.0f} s left, needs ~{est_s} s"}
            log(tag, r[tag])
            save(res)
            continue
        model = make_model("qwen3-8b", weights=False) if is_big else small
        x = r[tag] = {}
        extra = dict(extra)
        attention = extra.pop("attention", "triton")
        try:
            backend, x["engine_start_s"] = start_sglang_defaults(model, attention=attention, **extra)
        except Exception as e:  # noqa: BLE001 - record it and go on with the next part
            x["error"] = f"{type(e).__name__}: {e}"[:2000]
            log(tag, "engine failed", x["error"])
            save(res)
            subprocess.run(["pkill", "-9", "-f", "[s]glang::"], check=False)
            continue
        x["engine_kwargs"] = backend.engine_kwargs_used
        x["scoring"] = backend.scoring
        log(tag, "engine start", x["engine_start_s"], backend.scoring)
        save(res)
        try:
            t = time.perf_counter()
            warm(backend, w)
            x["warm_s"] = round(time.perf_counter() - t, 1)
            log(tag, "warm", x["warm_s"])
            save(res)
            for label, name, options in runs:
                if deadline - time.time() < 15:
                    x[label] = {"skipped": "time"}
                    continue
                with contextlib.suppress(Exception):
                    flush(backend.engine)
                out = WORK / f"{tag}_{label}.parquet"
                ctx = profiled(f"{tag}_w2") if label == "w2_profiled" else contextlib.nullcontext()
                with ctx:
                    x[label] = run_product(backend, *w[name], out, **options)
                log(tag, label, x[label])
                save(res)
        except Exception as e:  # noqa: BLE001
            x["error"] = f"{type(e).__name__}: {e}"[:2000]
            log(tag, "failed", x["error"])
            save(res)
        finally:
            with contextlib.suppress(Exception):
                backend.close()
            subprocess.run(["pkill", "-9", "-f", "[s]glang::"], check=False)


def roofline_stage(w3_rows: int, limit_s: float) -> None:
    """Issue 19 on one machine: the product's path today (triton attention, no CUDA graphs, one chunk) and
    each change — host overlap (`--chunk-rows` below the job size), multi-item scoring (`--engine-arg
    enable_mis=true`, flashinfer), prefill CUDA graphs (decode graphs off) — on 0.6B W1/W2/W3, parity of
    multi-item vs today on the same ids, and 8B W1 with multi-item and today's path. The multi-item parts
    run in a child process: an engine that dies there (sglang kills its owner) leaves the other parts."""
    from openjev_batch.pipeline.plan import plan

    t0 = time.time()
    deadline = t0 + limit_s
    small, tok, w = issue19_workloads(w3_rows)
    res: dict = {"issue19": {"w3_rows": w3_rows}}
    r = res["issue19"]
    for name in ("w1", "w2", "w3"):
        t = time.perf_counter()
        prompts = prompts_for(tok, *w[name])
        host = time.perf_counter() - t
        unique = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
        r[f"{name}_shape"] = {
            "host_prompt_s": round(host, 2),
            "unique_tokens": unique,
            "roofline_s": round(roofline_s("qwen3-0.6b", unique), 3),
            "roofline_attn_s": round(roofline_attn_s("qwen3-0.6b", unique, prompts), 3),
        }
    r["setup_s"] = round(time.time() - t0, 1)
    log("setup", r["setup_s"], r)
    save(res)
    env = {**os.environ, "W3_ROWS": str(w3_rows), "DEADLINE": str(deadline)}

    def child(tag: str) -> None:
        try:
            subprocess.run(
                [sys.executable, __file__, "issue19-mis"],
                env={**env, "PARTS": tag},
                timeout=max(1, deadline - time.time() + 60),
            )
        except subprocess.TimeoutExpired:
            log("child", tag, "timed out")
        subprocess.run(["pkill", "-9", "-f", "[s]glang::"], check=False)

    def parity(a: str, b: str, names) -> None:
        for name in names:
            ref, new = WORK / f"{a}_{name}.parquet", WORK / f"{b}_{name}.parquet"
            if ref.exists() and new.exists():
                r[f"parity_{b}_vs_{a}_{name}"] = p = label_logprob_parity(ref, new)
                log("parity", b, "vs", a, name, p)
                save(res)

    issue19_parts("issue19_today", ["today"], w3_rows, deadline)
    child("multi_item")
    parity("today", "multi_item", ("w1", "w2", "w3"))
    issue19_parts("issue19_prefill_graphs", ["prefill_graphs"], w3_rows, deadline)
    child("big_multi_item")
    issue19_parts("issue19_big_today", ["big_today"], w3_rows, deadline)
    parity("big_today", "big_multi_item", ("w1",))
    r["wall_s"] = round(time.time() - t0, 1)
    save(res)


# Issue 19, run e (`gpu.sh issue19b`): the multi-item readback patch (scheduler_patch.apply_readback) against
# sglang's own readback in the same run (0.6B W3), and the 8B W1 baseline run d lacked (the first-branch
# pattern next to the default, multi-item scoring). Estimated seconds per part on the H200 (run d: engine
# start ~32 s, flashinfer JIT warm-up ~33 s the first time on a machine, triton's ~40 s, 8B W1 ~9 s).
ISSUE19B_W3 = (40, 160) if SMOKE else (5000, 20000)  # (tickets always run, tickets when time allows)
# Order = priority: the readback pair, then 8B's missing baseline (the first-branch pattern), then 8B's default.
ISSUE19B_EST = {"mis_patched": 100, "mis_stock_readback": 65, "big_branches": 100, "big_multi_item": 60}
ISSUE19B_ORDER = tuple(ISSUE19B_EST)


def issue19b_workloads():
    """0.6B model, tokenizer, W1, and W3 with its first ISSUE19B_W3[0] and all ISSUE19B_W3[1] tickets (the
    same generator, so the smaller file is the head of the larger)."""
    import workloads as wl
    from transformers import AutoTokenizer

    small = make_model("qwen3-0.6b", weights=True)
    tok = AutoTokenizer.from_pretrained(small)
    d = WORK / "wl"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "w1.jsonl").exists():
        wl.w1(tok, d, **({"rows": 40, "prefix_tokens": 120} if SMOKE else {}))
    few, full = ISSUE19B_W3
    full_p, few_p = d / f"w3_{full}.jsonl", d / f"w3_{few}.jsonl"
    if not full_p.exists():
        wl.w3(tok, d, rows=full, **({"ticket_tokens": 40} if SMOKE else {}))
        (d / "w3.jsonl").rename(full_p)
    if not few_p.exists():
        with open(full_p) as f:
            few_p.write_text("".join(next(f) for _ in range(few)))
    q3 = d / "w3_questions.json"
    return (
        small,
        tok,
        {"w1": (d / "w1.jsonl", d / "w1_questions.json"), "w3": (few_p, q3), "w3_full": (full_p, q3)},
    )


def issue19b_part(tag: str, deadline: float) -> None:
    """One engine of run e (results.json["issue19b"][tag]); in a child process of `issue19b_stage`.
    The runs after the first pair wait for time: W3 in full only when both readbacks and the 8B parts
    still fit (the unpatched one only when the patched one ran it); a py-spy profile last."""
    small, tok, w = issue19b_workloads()
    mis = {} if SMOKE else {"attention": "flashinfer", "enable_mis": True}  # the CPU engine has no flashinfer
    table = {  # tag: (8B?, --sglang-patches, engine args)
        "mis_patched": (False, "all", mis),
        "mis_stock_readback": (False, "gather", mis),  # sglang#39642's gather kept, the readback sglang's own
        "big_multi_item": (True, "all", {**mis, "load_format": "dummy"}),
        "big_branches": (True, "all", {"enable_mis": False, "load_format": "dummy"}),  # run d's "today"
    }
    is_big, patches, extra = table[tag]
    later = sum(ISSUE19B_EST[t] for t in ISSUE19B_ORDER[ISSUE19B_ORDER.index(tag) + 1 :])
    res = {"issue19b": json.loads((WORK / "results.json").read_text()).get("issue19b", {})}
    x = res["issue19b"][tag] = {"sglang_patches": patches}
    model = make_model("qwen3-8b", weights=False) if is_big else small
    extra = dict(extra)
    attention = extra.pop("attention", "triton")
    try:
        backend, x["engine_start_s"] = start_sglang_defaults(
            model, attention=attention, patches=patches, **extra
        )
    except Exception as e:  # noqa: BLE001 - recorded; the parent goes on with the next part
        x["error"] = f"{type(e).__name__}: {e}"[:2000]
        log(tag, "engine failed", x["error"])
        save(res)
        return
    x.update(engine_kwargs=backend.engine_kwargs_used, scoring=backend.scoring)
    log(tag, "engine start", x["engine_start_s"], backend.scoring, "patches", patches)
    save(res)

    def run(label: str, name: str, need_s: float = 15, profile: bool = False) -> dict | None:
        left = deadline - time.time()
        if left < need_s:
            x[label] = {"skipped": f"{left:.0f} s left, needs ~{need_s:.0f} s"}
            log(tag, label, x[label])
            save(res)
            return None
        with contextlib.suppress(Exception):
            flush(backend.engine)
        with profiled(f"issue19b_{tag}_{label}") if profile else contextlib.nullcontext():
            x[label] = run_product(backend, *w[name], WORK / f"issue19b_{tag}_{label}.parquet")
        log(tag, label, x[label])
        save(res)
        return x[label]

    try:
        t = time.perf_counter()
        warm(backend, w)
        x["warm_s"] = round(time.perf_counter() - t, 1)
        log(tag, "warm", x["warm_s"])
        save(res)
        if is_big:
            run("w1", "w1")
            run("w1_again", "w1")
        else:
            few = run("w3", "w3")
            run("w3_again", "w3")
            if few:
                full_s = few["s"] * ISSUE19B_W3[1] / ISSUE19B_W3[0] + 10  # + the larger file's host stage
                patched_ran = "s" in res["issue19b"].get("mis_patched", {}).get("w3_full", {})
                # `later`: the estimates of the parts after this one (for mis_patched: the unpatched engine's
                # own runs and the 8B parts); the unpatched engine's full run is counted where it is pending
                if tag == "mis_patched":
                    run("w3_full", "w3_full", need_s=2 * full_s + later)
                elif patched_ran:
                    run("w3_full", "w3_full", need_s=full_s + later)
                else:
                    x["w3_full"] = {"skipped": "the patched engine did not run it"}
                # where the scheduler's time goes with the patch (py-spy, if carried), last
                if tag == "mis_patched":
                    pending = full_s if "s" in x.get("w3_full", {}) else 0
                    run("w3_profiled", "w3", need_s=few["s"] + 20 + pending + later, profile=True)
    except Exception as e:  # noqa: BLE001
        x["error"] = f"{type(e).__name__}: {e}"[:2000]
        log(tag, "failed", x["error"])
        save(res)
    finally:
        with contextlib.suppress(Exception):
            backend.close()


def issue19b_stage(limit_s: float) -> None:
    """Run e of issue 19 within `limit_s` seconds: each part (ISSUE19B_ORDER) in a child process (an engine
    that dies there leaves the others), skipped when its estimate no longer fits; parity of the readback
    patch against sglang's own (same ids: the values must agree to bf16 batch noise) and of the 8B patterns;
    every result saved as it lands, so a deadline leaves what was measured."""
    from openjev_batch.backends.sglang import scheduler_patch
    from openjev_batch.pipeline.plan import plan

    t0 = time.time()
    deadline = t0 + limit_s
    small, tok, w = issue19b_workloads()
    res: dict = {"issue19b": {"w3_tickets": list(ISSUE19B_W3), "limit_s": limit_s}}
    r = res["issue19b"]
    # Does this sglang have what the patch replaces? (the same check its scheduler processes make)
    r["readback_patch_fits"] = scheduler_patch.readback_target() is not None
    for name in ("w1", "w3"):
        prompts = prompts_for(tok, *w[name])
        unique = sum(x.unique_tokens for x in plan(prompts, 1 << 40, 1 << 40))
        r[f"{name}_shape"] = {
            "unique_tokens": unique,
            "roofline_attn_s": round(roofline_attn_s("qwen3-0.6b", unique, prompts), 3),
        }
    r["setup_s"] = round(time.time() - t0, 1)
    log("issue19b setup", r)
    save(res)
    for tag in ISSUE19B_ORDER:
        left = deadline - time.time()
        # a part runs when its own estimate fits; the ones after it skip themselves the same way
        if left < ISSUE19B_EST[tag]:
            res = {"issue19b": json.loads((WORK / "results.json").read_text())["issue19b"]}
            res["issue19b"][tag] = {"skipped": f"{left:.0f} s left, needs ~{ISSUE19B_EST[tag]} s"}
            log(tag, res["issue19b"][tag])
            save(res)
            continue
        try:
            subprocess.run(
                [sys.executable, __file__, "issue19b-part"],
                env={**os.environ, "PART": tag, "DEADLINE": str(deadline)},
                timeout=max(1, deadline - time.time() + 20),
            )
        except subprocess.TimeoutExpired:
            log("child", tag, "timed out")
        subprocess.run(["pkill", "-9", "-f", "[s]glang::"], check=False)
    res = {"issue19b": json.loads((WORK / "results.json").read_text())["issue19b"]}
    r = res["issue19b"]
    for ref, new, label in (
        ("mis_stock_readback", "mis_patched", "w3"),
        ("mis_stock_readback", "mis_patched", "w3_full"),
        ("big_branches", "big_multi_item", "w1"),
    ):
        a, b = WORK / f"issue19b_{ref}_{label}.parquet", WORK / f"issue19b_{new}_{label}.parquet"
        if (
            a.exists()
            and b.exists()
            and "s" in r.get(ref, {}).get(label, {})
            and "s" in r[new].get(label, {})
        ):
            r[f"parity_{new}_vs_{ref}_{label}"] = p = label_logprob_parity(a, b)
            log("parity", new, "vs", ref, label, p)
    r["wall_s"] = round(time.time() - t0, 1)
    save(res)


KNOBS = {
    "k-chunk32k": {"chunked_prefill_size": 32768, "max_prefill_tokens": 32768},
    "k-nooverlap": {"disable_overlap_schedule": True},
    "k-fcfs": {"schedule_policy": "fcfs"},
}


def main() -> None:
    import torch

    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    import sglang

    save(
        {
            "meta": {
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "gpu": "cpu (SMOKE)" if SMOKE else torch.cuda.get_device_name(0),
                "sglang": sglang.__version__,
                "torch": torch.__version__,
                "peak_tflops": PEAK_TFLOPS,
            }
        }
    )
    for stage in sys.argv[1:]:
        t = time.time()
        if stage == "parity":
            stage_parity()
        elif stage == "small":
            bench_shape("qwen3-0.6b", ["w1", "w3", "w2"], baselines=True)
        elif stage == "small2":
            bench_shape("qwen3-0.6b", ["w2"], baselines=True)
        elif stage == "small23":
            bench_shape("qwen3-0.6b", ["w3", "w2"], baselines=True)
        elif stage == "big":
            bench_shape("qwen3-8b", ["w1"], baselines=True)
        elif stage == "prof":
            stage_prof()
        elif stage == "big2":
            stage_big()
        elif stage == "final-small":
            stage_final("qwen3-0.6b")
        elif stage == "final-big":
            stage_final("qwen3-8b")
        elif stage.startswith("hybrid"):  # issue 17: hybrid:35b:35b-stock-moe:30b (benchmarks/hybrid_gpu.py)
            subprocess.run(
                [sys.executable, str(ROOT / "benchmarks/hybrid_gpu.py"), *stage.split(":")[1:]], check=False
            )
        elif stage == "classify":
            subprocess.run([sys.executable, str(ROOT / "benchmarks/classify_gpu.py")], check=False)
        elif stage == "sync-big":
            stage_sync("qwen3-8b", ["w1"])
        elif stage == "sync-small":
            stage_sync("qwen3-0.6b", ["w1", "w2"], repeats=3)
        elif stage == "sweep-small":
            stage_sweep_small()
        elif stage == "sync-small1":
            stage_sync("qwen3-0.6b", ["w1"], repeats=3)
        elif stage == "sync-small3":
            stage_sync("qwen3-0.6b", ["w1", "w2", "w3"], repeats=2)
        elif stage == "fi-big":
            stage_sync("qwen3-8b", ["w1"], repeats=2, attention="flashinfer")
        elif stage == "k64-big":
            knobs = {"chunked_prefill_size": 65536, "max_prefill_tokens": 65536}
            stage_sync("qwen3-8b", ["w1"], repeats=2, knobs=knobs, tag="-chunk64k")
        elif stage == "issue19":
            roofline_stage(int(os.environ.get("W3_ROWS", "5000")), float(os.environ.get("LIMIT_S", "480")))
        elif stage == "issue19-mis":  # a child process of issue19: one multi-item part
            tag = os.environ["PARTS"]
            issue19_parts(f"issue19_{tag}", [tag], int(os.environ["W3_ROWS"]), float(os.environ["DEADLINE"]))
        elif stage == "issue19b":  # issue 19 run e: the multi-item readback patch, the 8B baseline
            issue19b_stage(float(os.environ.get("LIMIT_S", "430")))
        elif stage == "issue19b-part":  # a child process of issue19b: one engine
            issue19b_part(os.environ["PART"], float(os.environ["DEADLINE"]))
        elif stage in KNOBS:
            stage_prof(KNOBS[stage], tag="-" + stage)
        else:
            raise SystemExit(f"unknown stage {stage}")
        log("stage", stage, "done in", round(time.time() - t, 1), "s")


if __name__ == "__main__":
    main()
