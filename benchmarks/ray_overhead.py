"""Overhead of `run --ray` against the plain single-machine path on the same workload (issue 8).

Both timings are end to end and include the engine start: the plain path loads its backend in-process,
the Ray path starts a local cluster, the CPU render actors and `--workers` engine actors. Each Ray output
is checked to be the plain run's file, value for value.

    # CPU, tiny model (numbers in docs/scale-out.md)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ray_overhead.py -m MODEL_DIR -b hf --device cpu --workload w3 --rows 300
    # one H200 (not run yet): one GPU actor against the plain path, W1 and W3
    .venv/bin/python benchmarks/ray_overhead.py -m Qwen/Qwen3-0.6B -b sglang --workload w1 --rows 256 --workers 1 \
        --out benchmarks/results/ray-overhead-h200-w1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).parent))
from workloads import w1, w3  # noqa: E402

from openjev_batch.config import build_config  # noqa: E402
from openjev_batch.pipeline.job import run_job, run_job_ray  # noqa: E402
from openjev_batch.pipeline.runners.ray import RayOptions  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-b", "--backend", default="sglang")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workload", choices=["w1", "w3"], default="w3")
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--workers", type=int, nargs="+", default=[1])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/openjev-ray-overhead"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--attention-backend")
    ap.add_argument("--engine-arg", action="append", default=[], help="key=value (JSON value), repeatable")
    ap.add_argument(
        "--warm", action="store_true", help="run a 16-row plain job first (JIT compile, caches), untimed"
    )
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(a.model)
    inp, qs = (w1 if a.workload == "w1" else w3)(tok, a.dir, rows=a.rows)
    cfg = build_config(
        input=inp,
        questions_file=qs,
        output=a.dir / "plain.parquet",
        model=a.model,
        backend=a.backend,
        device=a.device,
        attention_backend=a.attention_backend,
        engine_args={
            k: json.loads(v) if v[:1] in "0123456789tfn[{" else v
            for k, v in (x.split("=", 1) for x in a.engine_arg)
        },
        progress=False,
    )
    res: dict = {"workload": a.workload, "rows": a.rows, "model": a.model, "backend": a.backend}
    if a.warm:  # a fresh GPU machine JIT-compiles kernels on the first engine start: keep that out of both
        sub = a.dir / "warm.jsonl"
        sub.write_text("".join(open(inp).readlines()[:16]))
        t = time.perf_counter()
        run_job(cfg.model_copy(update={"input": sub, "output": a.dir / "warm.parquet"}))
        res["warm_s"] = round(time.perf_counter() - t, 2)
    res["load_avg_1min_before"] = os.getloadavg()[0]
    t = time.perf_counter()
    s = run_job(cfg)
    res["plain_s"] = round(time.perf_counter() - t, 2)
    res["plain_summary"] = {
        "branch_tokens": s.branch_tokens,
        "cached": s.cached_tokens,
        "warm": s.warm_tokens,
    }
    ref = pq.read_table(cfg.output).to_pylist()
    for w in a.workers:
        out = a.dir / f"ray-{w}.parquet"
        t = time.perf_counter()
        s = run_job_ray(cfg.model_copy(update={"output": out}), RayOptions(workers=w))
        res[f"ray_{w}_workers_s"] = round(time.perf_counter() - t, 2)
        res[f"ray_{w}_workers_summary"] = {
            "branch_tokens": s.branch_tokens,
            "cached": s.cached_tokens,
            "warm": s.warm_tokens,
            "buckets": s.buckets,
        }
        got = pq.read_table(out).to_pylist()
        res[f"ray_{w}_workers_same_file"] = got == ref
        # on a GPU, bf16 kernels vary with batch composition: say how far apart the two runs are
        res[f"ray_{w}_workers_same_answers"] = sum(
            x["answer"] == y["answer"] for x, y in zip(got, ref, strict=True)
        )
        res[f"ray_{w}_workers_max_abs_dprob"] = max(
            (abs(p - q) for x, y in zip(got, ref, strict=True) if x["probs"] and y["probs"]
             for p, q in zip(x["probs"], y["probs"], strict=True)),
            default=0.0,
        )  # fmt: skip
        res["answers"] = len(ref)
    res["load_avg_1min_after"] = os.getloadavg()[0]
    print(json.dumps(res, indent=1))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
