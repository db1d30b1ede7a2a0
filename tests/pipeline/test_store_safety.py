"""No silent data loss around the output store (issue 25): `--resume` keys the model by content, `-o` never
overwrites the job's own inputs, and the store follows no symlink and deletes or truncates only what it
made. CLI tests run the real command and check the exit code, the first stderr line and that every input
and output file is intact."""

from __future__ import annotations

import os
import shutil
import signal

import polars as pl
from conftest import cli, start_cli, wait_parts, write_jsonl

Q = {"u": {"type": "noul", "instructions": "Urgent?"}}


def _rows(n, prefix="r"):
    return [{"id": f"{prefix}{i}", "state": f"ticket number {i}", "questions": Q} for i in range(n)]


def _snapshot(*paths):
    """Every file under `paths` (files or folders) → its bytes: what must be left exactly as it was."""
    out = {}
    for p in paths:
        for f in [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()):
            out[str(f)] = f.read_bytes()
    return out


def _first_line(r):
    return r.stderr.strip().splitlines()[0] if r.stderr.strip() else ""


# -- 1. --resume keys the model by content -----------------------------------------------------------------
def test_resume_after_a_weight_swap_is_refused_and_the_partial_kept(tiny_model, qwen3_tok_dir, tmp_path):
    from tiny import make_tiny_qwen3

    model = tmp_path / "mswap"
    shutil.copytree(tiny_model, model)
    other = make_tiny_qwen3(qwen3_tok_dir, tmp_path / "other", seed=1)  # same shapes, other weights
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(60))
    out, partial = tmp_path / "m.parquet", tmp_path / "m.parquet.partial"
    args = ["run", inp, "-m", model, "-b", "hf", "--chunk-rows", "2", "-o", out, "--no-progress"]
    p = start_cli(*args, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    wait_parts(partial, p, 2, timeout=300)
    p.send_signal(signal.SIGKILL)  # a crash: the partial stays for --resume
    p.wait()
    original = (model / "model.safetensors").read_bytes()
    shutil.copy(other / "model.safetensors", model / "model.safetensors")
    kept = _snapshot(partial)
    r = cli(*args, "--resume")
    assert r.returncode == 4, r.stderr
    line = _first_line(r)
    assert line.startswith("error: --resume:") and "differs in: model content" in line, r.stderr
    assert _snapshot(partial) == kept and not out.exists()

    (model / "model.safetensors").write_bytes(original)  # the same weights again: the resume continues
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["id"].to_list() == [f"r{i}" for i in range(60)]
