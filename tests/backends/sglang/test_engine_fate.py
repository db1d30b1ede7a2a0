"""The product owns the process's fate on the real CPU sglang engine (issue #16): a killed scheduler, an engine
that cannot start and SIGTERM end the job with the product's message and exit code (never sglang's SIGKILL,
rc 137), the partial kept; a branch over the engine's own input limit is a row error, not a dead job.

Each test starts its own engine in a `run -b sglang` subprocess (the fate of that process is what is
tested), so they are slow: `-m sglang`."""

import json
import os
import shutil
import signal

import polars as pl
import pytest
from conftest import cli, sglang_cpu_env, start_cli, wait_parts, write_jsonl

pytestmark = pytest.mark.sglang
Q = {"u": {"type": "noul", "instructions": "Urgent?"}, "c": {"type": "noul", "instructions": "Calm?"}}


def _rows(n, long_row=None):
    rows = [{"id": f"r{i}", "state": f"ticket number {i}", "questions": Q} for i in range(n)]
    if long_row is not None:
        rows[long_row]["state"] = "word " * 600  # > the 256-token context the tests give the engine
    return rows


@pytest.fixture
def sg_env(monkeypatch):
    pytest.importorskip("sglang.srt")
    for k, v in sglang_cpu_env().items():
        monkeypatch.setenv(k, v)
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


def _scheduler(pid):
    import psutil

    kids = psutil.Process(pid).children(recursive=True)
    return next(c for c in kids if "scheduler" in " ".join(c.cmdline()) or "scheduler" in c.name())


def test_killed_scheduler_ends_the_job_exit_4_and_resume_finishes_with_the_long_row_error(
    tiny_model, tmp_path, sg_env
):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(60, long_row=3))
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    args = ["run", inp, "-m", tiny_model, "-b", "sglang", "-o", out, "--chunk-rows", "2", "--no-progress"]
    args += ["--context-length", "256"]
    p = start_cli(*args, env=sg_env)
    wait_parts(partial, p, 3)  # chunk 1 holds the long row: answered around, not a dead job
    sched = _scheduler(p.pid)
    sched.kill()
    _, err = p.communicate(timeout=300)
    assert p.returncode == 4, err[-3000:]
    msg = " ".join(err.split("error:")[-1].split())  # rich wraps long lines
    assert (
        f"the sglang engine died: sglang's scheduler_0 process (pid {sched.pid}) exited with code -9" in msg
    )
    assert "(killed by SIGKILL)" in msg and "Traceback" not in msg
    assert not out.exists() and len(list(partial.glob("part-*.parquet"))) >= 3
    r = cli(*args, "--resume")
    assert r.returncode == 3, r.stderr[-3000:]  # the long row's questions carry an error
    df = pl.read_parquet(out)
    assert df["id"].unique(maintain_order=True).to_list() == [f"r{i}" for i in range(60)]
    bad = df.filter(pl.col("error").is_not_null())
    assert bad["id"].to_list() == ["r3", "r3"]
    limit, source = bad["error"][0].rsplit("limit ", 1)[1].split(" ", 1)
    assert bad["error"][0].startswith("row r3: questions.u: branch has ") and 240 <= int(limit) < 256
    assert source == "(the model's context length)"  # not --max-branch-tokens' 32,768: where it comes from


def test_an_engine_that_cannot_start_ends_the_job_exit_4_naming_the_cause(tiny_model, tmp_path, sg_env):
    """A scheduler that fails: a config sglang cannot build (the tokenizer, loaded here, is fine). The same path as no room for a KV pool (the packaged qwen2.5-0.5b at the CPU
    default 0.05), which cannot be provoked reliably on a shared machine: sglang compares free memory before
    and after loading, and other processes move it."""
    model = tmp_path / "torn"
    shutil.copytree(tiny_model, model)
    # a config sglang cannot build (4 query heads over 3 KV heads): the product's own checks pass (a corrupt
    # file is refused before any engine starts, issue 25), and the scheduler fails loading the tensors
    cfg = json.loads((model / "config.json").read_text())
    cfg["num_key_value_heads"] = 3
    (model / "config.json").write_text(json.dumps(cfg))
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(2))
    out = tmp_path / "o.parquet"
    r = cli("run", inp, "-m", model, "-b", "sglang", "-o", out, "--no-progress")
    assert r.returncode == 4, r.stderr[-3000:]
    msg = " ".join(r.stderr.split("error:")[-1].split())
    # sglang builds the attention on the first forward: the engine starts, then its scheduler fails
    assert "the sglang scheduler failed: RuntimeError: Number of heads" in msg, msg
    # its traceback is not printed above the message (issue 25): the cause is in the message, and
    # --engine-arg log_level=info shows the traceback
    assert "Traceback" not in r.stderr and "Scheduler hit an exception" not in r.stderr, r.stderr[-3000:]
    assert "(its traceback: --engine-arg log_level=info)" in msg
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()


def test_sigterm_stops_an_sglang_job_like_ctrl_c(tiny_model, tmp_path, sg_env):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(60))
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    args = ["run", inp, "-m", tiny_model, "-b", "sglang", "-o", out, "--chunk-rows", "2", "--no-progress"]
    p = start_cli(*args, env=sg_env)
    wait_parts(partial, p, 2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=300)
    assert p.returncode == 143, err[-3000:]
    assert "terminated (SIGTERM): finished chunks are kept" in err
    n = len(list(partial.glob("part-*.parquet")))
    assert not out.exists() and 2 <= n < 30


def test_killed_scheduler_ends_a_classify_job_exit_4_with_the_products_message(
    tiny_classifier, tmp_path, sg_env
):
    """The classifier engine starts under the same signal handling as the causal one (signals.start_engine):
    a scheduler that dies mid-job ends `classify -b sglang` with exit 4 and the product's message, not
    sglang's SIGKILL of this process (rc -9/137), and the finished chunks stay for --resume."""
    rows = [
        {"id": f"r{i}", "premise": f"ticket {i} is open", "hypothesis": "it is closed"} for i in range(200)
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    args = ["classify", inp, "-m", tiny_classifier, "-b", "sglang", "-o", out, "--chunk-rows", "2"]
    p = start_cli(*args, "--no-progress", env=sg_env)
    wait_parts(partial, p, 2)
    sched = _scheduler(p.pid)
    sched.kill()
    _, err = p.communicate(timeout=300)
    assert p.returncode == 4, err[-3000:]
    msg = " ".join(err.split("error:")[-1].split())
    assert f"the sglang engine died: sglang's scheduler_0 process (pid {sched.pid})" in msg, msg
    assert "Traceback" not in msg
    assert not out.exists() and len(list(partial.glob("part-*.parquet"))) >= 2


def test_a_script_without_a_main_guard_is_told_so_in_one_line(tiny_model, tmp_path, sg_env):
    """Issue 26: a script that runs the product with `-b sglang` at its top level (no `if __name__ ==
    "__main__":`) failed with a message blaming a possible out-of-memory kill; Python's own main-guard error
    was buried in the engine's log. sglang's spawned processes re-run the script: the product says so."""
    import subprocess
    import sys

    inp = write_jsonl(tmp_path / "in.jsonl", _rows(2))
    script = tmp_path / "job.py"
    script.write_text(
        "import sys\nfrom openjev_batch.cli import main\n"
        f"sys.argv = ['openjev-batch', 'run', {str(inp)!r}, '-m', {str(tiny_model)!r}, '-b', 'sglang', "
        f"'-o', {str(tmp_path / 'o.parquet')!r}, '--no-progress']\nmain()\n"
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=sg_env, timeout=600)
    assert r.returncode == 4, r.stderr[-3000:]
    msg = " ".join(r.stderr.split("error:")[-1].split())
    assert 'has no `if __name__ == "__main__":` guard' in msg and "memory" not in msg, msg
