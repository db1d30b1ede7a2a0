"""One label-logprobs workload through the product against its naive baselines (the body of w1_gpu.py,
w2_gpu.py and w3_gpu.py, one file per workload).

Per model shape: each variant is its own `openjev_batch.Classifier` (documented options only; engine
start reported apart, an empty radix cache at the first job); a warm-up job on other rows of the same
shape (seed 1: no prefix in common with the measured rows) compiles what the product's own warm-up did
not; then the measured job end to end (benchmarks/product.py). The baselines start `sglang.Engine`
themselves (benchmarks/naive.py) with the same engine settings. Results merge into $OUT/results.json.

`--smoke` runs the plumbing on a CPU: the tiny random Qwen3 with the real tokenizer, a few rows, sglang's
CPU engine (PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1, as the CPU sglang tests); no number means
anything there.
"""

from __future__ import annotations

import argparse
import re
import time

import common
from common import HYBRID, HYBRID_TEXT, WORK, log, make_model, roofline_s, save

# Named variants: each a set of documented options (`gXdY`: --groups-per-window X --pipeline-depth Y).
VARIANTS = {
    "default": {},
    "first-branch": {"request_pattern": "first-branch"},  # --request-pattern first-branch
    "prefix-first": {"request_pattern": "prefix-first"},  # the hybrid pattern before multi-item scoring
    "multi-item": {"request_pattern": "multi-item"},
    "stock-scheduler": {"sglang_patches": "none"},  # --sglang-patches none: sglang's own scheduler
    "flashinfer": {"attention_backend": "flashinfer"},
    "fp8": {"engine_args": {"quantization": "fp8"}},  # --engine-arg quantization=fp8
    # --engine-arg mamba_radix_cache_strategy=no_buffer --engine-arg disable_overlap_schedule=true (the CLI
    # parses `true` as a bool): sglang's recurrent-state strategy for hybrid models without the extra_buffer
    # ping-pong slots, which sglang refuses with the overlap scheduler on. The product reads it back and sizes
    # its groups at 1 state slot per running request. sglang 0.5.17 still caps running requests at slots / 3,
    # and on the Qwen3_5MoeForCausalLM shape its default is already no extra buffer (docs/benchmarks.md run 9).
    "no-buffer": {
        "engine_args": {"mamba_radix_cache_strategy": "no_buffer", "disable_overlap_schedule": True}
    },
}


def variant_options(name: str) -> dict:
    if m := re.fullmatch(r"g(\d+)d(\d+)", name):
        return {"groups_per_window": int(m[1]), "pipeline_depth": int(m[2])}
    if name not in VARIANTS:
        raise SystemExit(f"unknown variant {name!r}: {', '.join(VARIANTS)} or gXdY")
    return dict(VARIANTS[name])


def parser(workload: str, shapes: list[str], baselines: list[str]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=f"{workload.upper()} through the product vs naive baselines.")
    choices = [*common.SHAPES, HYBRID, HYBRID_TEXT]
    ap.add_argument("--shape", action="append", choices=choices, help=f"model shape (default {shapes})")
    ap.add_argument("--variant", action="append", help="default | first-branch | prefix-first | multi-item | "
                    "stock-scheduler | flashinfer | fp8 | no-buffer | gXdY "
                    "(repeatable; default: default)")  # fmt: skip
    ap.add_argument("--baseline", action="append", choices=["naive", "one-call", "transformers"],
                    help=f"baselines to run (default {baselines})")  # fmt: skip
    ap.add_argument("--no-baselines", action="store_true", help="the product only")
    ap.add_argument("--rows", type=int, help="only the first ROWS rows of the workload (W3: 5000 in run 5)")
    ap.add_argument("--smoke", action="store_true", help="the plumbing on a CPU (tiny model, few rows)")
    ap.add_argument(
        "--profile", action="store_true", help="py-spy over the default variant's job (if carried)"
    )
    return ap


def kit_engine_kwargs(smoke: bool, dummy: bool) -> dict:
    """The baselines' sglang.Engine settings: the kit's (triton attention, pytorch sampling) and the
    product's GPU defaults for prefill-only work (a 32k-token prefill budget on an 80 GiB GPU)."""
    if smoke:
        return dict(device="cpu", attention_backend="torch_native", dtype="float32",
                    mem_fraction_static=0.05, max_total_tokens=200_000)  # fmt: skip
    kw = dict(attention_backend="triton", sampling_backend="pytorch", mem_fraction_static=0.8,
              chunked_prefill_size=32768, max_prefill_tokens=32768)  # fmt: skip
    return {**kw, **({"load_format": "dummy"} if dummy else {})}


def warm_file(tok, workload: str, small: bool):
    """Rows of the workload's shape that share no prefix with the measured ones (seed 1), for warm-ups."""
    import workloads as wl

    d = WORK / ("wl-warm-small" if small else "wl-warm")
    d.mkdir(parents=True, exist_ok=True)
    sizes = {"w1": dict(rows=8, prefix_tokens=120), "w2": dict(total=28), "w3": dict(rows=32)}
    if not (d / f"{workload}.jsonl").exists():
        getattr(wl, workload)(tok, d, seed=1, **sizes[workload])
    return d / f"{workload}.jsonl", (None if workload == "w2" else d / f"{workload}_questions.json")


def product_runs(workload: str, shape: str, model, files, warm, variants, a) -> dict:
    from product import engine_options, open_classifier, run_job

    res = {}
    dummy = shape not in ("qwen3-0.6b", "tiny")
    for name in variants:
        opts = engine_options(a.smoke, **variant_options(name))
        if dummy:
            opts["engine_args"].setdefault("load_format", "dummy")
        key = f"{workload}/{shape}/{name}"
        try:
            clf, start_s = open_classifier(model, "sglang", **opts)
        except Exception as e:  # noqa: BLE001 - recorded; the next variant still runs
            res[key] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            log(key, res[key])
            continue
        r: dict = {"start_s": start_s, "options": opts}
        try:
            t = time.perf_counter()
            run_job(clf, *warm)
            r["warm_job_s"] = round(time.perf_counter() - t, 1)
            ctx = common.profiled(f"{workload}_{shape}_{name}") if a.profile and name == "default" else None
            with ctx or _null():
                r["product"] = run_job(clf, *files, WORK / f"{workload}-{name}.parquet")
            r["roofline_s"] = (
                round(roofline_s(shape, r["product"]["unique_tokens"]), 3) if shape != "tiny" else None
            )
        except Exception as e:  # noqa: BLE001 - recorded with its start-up; the next variant still runs
            # (H200 run 9: the no-buffer job's engine died of a CUDA OOM and took the later variants with it)
            r["error"] = f"{type(e).__name__}: {e}"[:2000]
        finally:
            clf.close()
        res[key] = r
        log(key, r)
        save({key: r})
    return res


def _null():
    import contextlib

    return contextlib.nullcontext()


def baseline_runs(workload: str, shape: str, model, tok, files, warm, baselines, a) -> dict:
    import naive

    key = f"{workload}/{shape}/baselines"
    r: dict = {}
    rows = naive.branches(tok, *files)
    dummy = shape not in ("qwen3-0.6b", "tiny")
    if {"naive", "one-call"} & set(baselines):
        engine, r["engine_start_s"] = naive.start_engine(model, **kit_engine_kwargs(a.smoke, dummy))
        try:
            naive.naive(engine, naive.branches(tok, *warm))  # kernels compiled outside the timing
            if "naive" in baselines:
                r["naive_n_plus_1"] = naive.naive(engine, rows)
                log(key, "naive N+1", r["naive_n_plus_1"])
            if "one-call" in baselines:
                r["one_call"] = naive.naive(engine, rows, one_call=True)
                log(key, "one call", r["one_call"])
        finally:
            engine.shutdown()
    if "transformers" in baselines:
        r["transformers_batched"] = naive.hf_batched(model, rows, device="cpu" if a.smoke else "cuda")
        log(key, "transformers", r["transformers_batched"])
    save({key: r})
    return r


def main(workload: str, shapes: list[str], baselines: list[str]) -> None:
    a = parser(workload, shapes, baselines).parse_args()
    from transformers import AutoTokenizer

    shapes = ["tiny"] if a.smoke else a.shape or shapes
    baselines = [] if a.no_baselines else a.baseline or baselines
    for shape in shapes:
        model = make_model(shape, weights=shape in ("qwen3-0.6b", "tiny"))
        tok = AutoTokenizer.from_pretrained(model)
        files = common.workload_files(tok, (workload,), small=a.smoke)[workload]
        if a.rows:
            files = (common.head(files[0], a.rows, WORK / f"{workload}-{a.rows}.jsonl"), files[1])
        warm = warm_file(tok, workload, a.smoke)
        product_runs(workload, shape, model, files, warm, a.variant or ["default"], a)
        if baselines:
            baseline_runs(workload, shape, model, tok, files, warm, baselines, a)
