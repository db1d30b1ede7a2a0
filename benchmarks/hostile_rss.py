"""Peak RSS of `validate` and `run --dry-run` on one row whose `state` is a single 50 MB string.

Before the state byte limit this row peaked at 6.3 GB in the tokenizer; now it is a row error found before
tokenizing. Runs the real command (a child process; peak RSS from getrusage of the children) on the real
Qwen3 tokenizer, which `--dry-run` loads as the model's tokenizer. Writes benchmarks/results/hostile_rss.json.

    .venv/bin/python benchmarks/hostile_rss.py [--mb 50] [--repo DIR]   # DIR: the checkout whose code runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb(cmd: list[str], cwd: Path) -> tuple[float, int, str]:
    """Run `cmd` in a fresh interpreter fork chain; returns (its peak RSS in MB, exit code, last stderr line)."""
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: measure each command in its own wrapper.
    wrapper = (
        "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode); "
        "print((r.stderr.strip().splitlines() or [''])[-1][:300])"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(
        [sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, cwd=cwd, env=env
    )
    first, _, last = res.stdout.partition("\n")
    kb, rc = first.split()
    return int(kb) / 1024, int(rc), last.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/hostile_rss.json")
    a = ap.parse_args()
    from common import tokenizer_dir  # `openjev-batch models fetch qwen3-tokenizer`, once

    tok = tokenizer_dir()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        inp = Path(d, "big.jsonl")
        words = ("lorem ipsum dolor sit amet " * (a.mb * 2**20 // 27 + 1))[: a.mb * 2**20]
        rows = [{"id": "big", "state": words}, {"id": "small", "state": "fine"}]
        q = {"q": {"type": "noul", "instructions": "Is it about money?"}}
        inp.write_text("".join(json.dumps({**r, "questions": q}) + "\n" for r in rows))
        py = [sys.executable, "-m", "openjev_batch"]
        cmds = {
            "validate": [*py, "validate", str(inp)],
            "dry_run": [
                *py,
                "run",
                str(inp),
                "-o",
                str(Path(d, "o.parquet")),
                "-m",
                str(tok),
                "-b",
                "hf",
                "--dry-run",
                "--no-progress",
            ],  # fmt: skip
        }
        for name, cmd in cmds.items():
            t0 = time.perf_counter()
            mb, rc, last = peak_rss_mb(cmd, a.repo)
            results[name] = {"peak_rss_mb": round(mb, 1), "exit": rc, "seconds": round(time.perf_counter() - t0, 1),
                             "last_stderr_line": last}  # fmt: skip
            print(name, results[name], flush=True)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=a.repo)
    out = {"state_mb": a.mb, "commit": rev.stdout.strip(), "host": platform.node(), "cpus": os.cpu_count(),
           "load_avg_1m": os.getloadavg()[0], "results": results}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=2) + "\n")
    print(a.out)


if __name__ == "__main__":
    main()
