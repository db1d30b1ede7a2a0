"""Overhead of `run --ray` against the plain single-machine path on the same workload (issue 8), both through
the `openjev-batch run` command.

Both timings are the whole command and include the engine start: the plain path loads its backend
in-process, the Ray path starts a local cluster, the CPU render actors and `--workers` engine actors. Each
Ray output is checked to be the plain run's file, value for value.

    # CPU, tiny model (numbers in docs/scale-out.md)
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ray_overhead.py -m MODEL_DIR -b hf --device cpu --workload w3 --rows 300
    # one H200: one GPU actor against the plain path, W1 and W3 (benchmarks/ray_gpu.sh)
    .venv/bin/python benchmarks/ray_overhead.py -m Qwen/Qwen3-0.6B -b sglang --workload w1 --rows 256 --workers 1 \
        --out benchmarks/results/ray-overhead-h200-w1.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cli, head  # noqa: E402
from workloads import w1, w3  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    a.dir.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(a.model)
    inp, qs = (w1 if a.workload == "w1" else w3)(tok, a.dir, rows=a.rows)
    engine = ["-m", a.model, "-b", a.backend, "--device", a.device, "--no-progress"]
    engine += ["--attention-backend", a.attention_backend] if a.attention_backend else []
    for kv in a.engine_arg:
        engine += ["--engine-arg", kv]

    def run(src: Path, out: Path, *extra) -> float:
        rc, s, text = cli("run", src, "-q", qs, "-o", out, *engine, *extra)
        if rc not in (0, 3):
            raise SystemExit(f"openjev-batch run failed ({rc}):\n{text}")
        return s

    res: dict = {"workload": a.workload, "rows": a.rows, "model": a.model, "backend": a.backend}
    if a.warm:  # a fresh GPU machine JIT-compiles kernels on the first engine start: keep that out of both
        res["warm_s"] = run(head(inp, 16, a.dir / "warm.jsonl"), a.dir / "warm.parquet")
    res["load_avg_1min_before"] = os.getloadavg()[0]
    res["plain_s"] = run(inp, a.dir / "plain.parquet")
    ref = pq.read_table(a.dir / "plain.parquet").to_pylist()
    for w in a.workers:
        out = a.dir / f"ray-{w}.parquet"
        res[f"ray_{w}_workers_s"] = run(inp, out, "--ray", "--workers", w)
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
