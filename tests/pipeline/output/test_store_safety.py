"""No silent data loss around the output store (issue 25): `--resume` keys the model by content, `-o` never
overwrites the job's own inputs, and the store follows no symlink and deletes or truncates only what it
made. CLI tests run the real command and check the exit code, the first stderr line and that every input
and output file is intact."""

from __future__ import annotations

import os
import shutil
import signal

import polars as pl
import pytest
from conftest import ROOT, cli, start_cli, wait_parts, write_jsonl

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


def test_resume_with_a_broken_part_names_it_and_continues_once_it_is_deleted(tiny_model, tmp_path):
    """Issue 34.17: a truncated part file ended `--resume` in pyarrow's traceback (Parquet magic bytes not
    found); a damaged footer gave an exit 4 naming no file. Both are one line naming the part and the fix,
    the partial is kept, and the fix works."""
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(40))
    out, partial = tmp_path / "b.parquet", tmp_path / "b.parquet.partial"
    args = ["run", inp, "-m", tiny_model, "-b", "hf", "--chunk-rows", "2", "-o", out, "--no-progress"]
    p = start_cli(*args, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    wait_parts(partial, p, 2, timeout=300)
    p.send_signal(signal.SIGKILL)
    p.wait()
    part = partial / "part-000001.parquet"
    whole = part.read_bytes()
    for broken in (whole[:100], whole[:-208] + b"\xff" * 200 + whole[-8:]):  # truncated; a damaged footer
        part.write_bytes(broken)
        # a part the SIGKILL caught half-written (`.part-*.tmp`) is the killed run's, which a resume removes
        # (CI, 2026-12-05: the kill fell inside a write); what must stay is every finished part and the ledger
        for stale in partial.glob(".part-*.tmp"):
            stale.unlink()
        kept = _snapshot(partial)
        r = cli(*args, "--resume")
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        msg = " ".join(r.stderr.split())
        assert msg.startswith(f"error: --resume: {part} cannot be read (") and msg.count("error:") == 1, msg
        assert "delete it and rerun with --resume" in msg and _snapshot(partial) == kept
    part.unlink()  # the fix the message gives: that chunk is run again
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["id"].to_list() == [f"r{i}" for i in range(40)]


def test_a_hub_id_is_keyed_by_its_cached_revision_recorded_once_downloaded(tmp_path, monkeypatch):
    """A hub id's key is the commit its cached snapshot names. Not cached when the job starts (the loader
    downloads it after the manifest is written), it is recorded once the model loaded, so a resume after a
    crash matches; a new commit under the same id is refused."""
    from huggingface_hub import constants

    from openjev_batch.checkpoint.weights import model_fingerprint
    from openjev_batch.errors import ConfigError
    from openjev_batch.pipeline.output.store import OutputStore

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--org--tiny"

    def download(commit):
        (repo / "snapshots" / commit).mkdir(parents=True)
        (repo / "snapshots" / commit / "config.json").write_text("{}")
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(commit)

    before = {"model content": model_fingerprint("org/tiny")}
    assert before["model content"] == {"hub_id": "org/tiny", "revision": None}
    out = tmp_path / "o.parquet"
    s = OutputStore(out, manifest=before)  # the job starts, then its loader downloads the model
    download("a" * 40)
    s.amend("model content", model_fingerprint("org/tiny"))
    s.release()
    after = {"model content": model_fingerprint("org/tiny")}
    assert after["model content"]["revision"] == "a" * 40
    OutputStore(out, manifest=after, resume=True).release()  # the resume's key matches
    download("b" * 40)  # the hub moved on and the cache followed: other weights under the same id
    with pytest.raises(ConfigError, match="differs in: model content"):
        OutputStore(out, manifest={"model content": model_fingerprint("org/tiny")}, resume=True)


# -- 3. the store follows no symlink, and deletes or truncates only what it made ---------------------------
def _run(tmp_path, model, out, *more):
    inp = tmp_path / "in.jsonl"
    if not inp.exists():
        write_jsonl(inp, _rows(3))
    return cli("run", inp, "-m", model, "-b", "hf", "-o", out, "--no-progress", *more)


def test_a_symlinked_lock_or_a_users_own_lock_is_refused_and_left_as_it_is(tiny_model, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's file\n")
    out = tmp_path / "o.parquet"
    lock = tmp_path / "o.parquet.lock"
    lock.symlink_to(precious)
    r = _run(tmp_path, tiny_model, out)
    assert r.returncode == 4, r.stderr
    assert _first_line(r).startswith("error: ") and "o.parquet.lock is a symbolic link" in _first_line(r)
    assert precious.read_text() == "the user's file\n" and lock.is_symlink()
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()

    lock.unlink()
    lock.write_text("my own notes, named so\n")  # a user's file, not a lock record
    r = _run(tmp_path, tiny_model, out)
    assert r.returncode == 4, r.stderr
    assert "o.parquet.lock exists and is not a lock of openjev-batch" in _first_line(r), r.stderr
    assert lock.read_text() == "my own notes, named so\n" and not out.exists()


def test_the_lock_of_a_job_that_died_is_taken_over_and_a_refused_job_leaves_no_lock(tmp_path):
    from openjev_batch.errors import ConfigError
    from openjev_batch.pipeline.output.store import OutputStore

    out = tmp_path / "o.parquet"
    lock = tmp_path / "o.parquet.lock"
    lock.write_text('{"pid": 1, "host": "gone", "started": "2026-01-01 00:00:00 UTC"}')  # its flock is free
    with OutputStore(out) as s:
        assert f'"pid": {os.getpid()}' in lock.read_text()
        s.close()
    assert not lock.exists()
    (tmp_path / "o.parquet.partial").mkdir()
    (tmp_path / "o.parquet.partial" / "manifest.json").write_text("{}")  # not the store's
    with pytest.raises(ConfigError, match="manifest.json was not written by openjev-batch"):
        OutputStore(out)
    assert not lock.exists()  # the refused job's own lock is gone, the user's file kept
    assert (tmp_path / "o.parquet.partial" / "manifest.json").read_text() == "{}"


def test_a_symlinked_partial_is_refused_and_the_linked_folder_kept(tiny_model, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "manifest.json").write_text('{"job_id": "x"}')  # even one that looks like the store's
    (mine / "part-000000.parquet").write_bytes(b"my data")
    (mine / "chunks.jsonl").write_text("my lines\n")
    kept = _snapshot(mine)
    out = tmp_path / "o.parquet"
    (tmp_path / "o.parquet.partial").symlink_to(mine)
    r = _run(tmp_path, tiny_model, out)
    assert r.returncode == 4, r.stderr
    assert "o.parquet.partial is a symbolic link" in _first_line(r), r.stderr
    assert _snapshot(mine) == kept and not out.exists() and not (tmp_path / "o.parquet.lock").exists()


def test_files_with_the_stores_names_that_no_earlier_run_wrote_are_refused(tiny_model, tmp_path):
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    partial.mkdir()
    (partial / "manifest.json").write_text('{"my": "config"}\n')
    (partial / "part-000000.parquet").write_bytes(b"my data")
    kept = _snapshot(partial)
    r = _run(tmp_path, tiny_model, out)
    assert r.returncode == 4, r.stderr
    assert "manifest.json was not written by openjev-batch" in _first_line(r), r.stderr
    assert _snapshot(partial) == kept
    (partial / "manifest.json").unlink()  # no manifest at all: the part is nobody's
    kept = _snapshot(partial)
    r = _run(tmp_path, tiny_model, out)
    assert r.returncode == 4, r.stderr
    assert "holds part-000000.parquet, which no earlier run of this output wrote" in _first_line(r), r.stderr
    assert _snapshot(partial) == kept and not out.exists()


def test_a_part_of_another_job_is_refused_and_only_the_ledgers_job_is_deleted(tmp_path):
    """An earlier job's partial is replaced by a fresh run; a part of a third job copied in is not its to
    delete, and the run refuses before it deletes anything."""
    from openjev_batch.errors import ConfigError
    from openjev_batch.pipeline.output.store import OutputStore

    def stopped(name, chunks):
        s = OutputStore(tmp_path / name)
        for i in chunks:
            s.begin_chunk(i, 1, 1, f"h{i}")
            s.write(i, [{**dict.fromkeys(s.schema.names), "id": f"{name}{i}", "error": "x"}])
        s.release()
        return s

    a, b = stopped("a.parquet", [0, 1]), stopped("b.parquet", [5])
    shutil.copy(b.part(5), a.part(5))
    kept = _snapshot(a.partial)
    with pytest.raises(ConfigError, match="holds part-000005.parquet, which no earlier run"):
        OutputStore(tmp_path / "a.parquet")
    assert _snapshot(a.partial) == kept
    a.part(5).unlink()
    OutputStore(tmp_path / "a.parquet").release()  # a fresh run: the earlier job's parts and ledger go
    assert sorted(p.name for p in a.partial.iterdir()) == ["manifest.json"]
    (b.partial / "ray").mkdir()
    os.rename(b.partial / "ray", tmp_path / "elsewhere")
    (b.partial / "ray").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="ray is a symbolic link"):
        OutputStore(tmp_path / "b.parquet", resume=True)


# -- 2. -o never overwrites the job's own inputs -----------------------------------------------------------
def test_run_refuses_an_output_that_is_its_questions_or_system_prompt_file(tiny_model, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "state": f"ticket {i}"} for i in range(3)])
    q = tmp_path / "q.jsonl"  # any name is a questions file; this one is also an output name
    q.write_text('{"u": {"type": "noul", "instructions": "Urgent?"}}\n')
    sp = tmp_path / "prompt.jsonl"
    sp.write_text("You label support tickets.\n")
    lock_named = tmp_path / "o.parquet.lock"  # a file named as the output's lock
    lock_named.write_text("Be brief.\n")
    base = ["run", inp, "-m", tiny_model, "-b", "hf", "--no-progress"]
    cases = [
        (["-q", q, "-o", q], "output", "is the questions file (-q)"),
        (["-q", q, "-o", sp, "--system-prompt", f"@{sp}"], "output", "is the --system-prompt file"),
        (["-q", q, "-o", tmp_path / "o.parquet", "--system-prompt", f"@{lock_named}"], "lock", "file"),
        ([*["-q", tmp_path / "o.parquet.lock", "-o", tmp_path / "o.parquet"]], "lock", "(-q)"),
    ]
    kept = _snapshot(tmp_path)
    for args, first, what in cases:
        r = cli(*base, *args)
        assert r.returncode == 4, r.stderr
        line = _first_line(r)
        assert line.startswith("error: invalid options: ") and first in line and what in line, r.stderr
        assert "writing it would destroy it" in " ".join(r.stderr.split())
        assert _snapshot(tmp_path) == kept  # nothing written, no input touched


TEST = ROOT / "evals" / "fixtures" / "mmlu_pro_test.jsonl"


def test_eval_never_writes_over_its_benchmark_nor_a_folder_without_an_eval_job(tiny_model, tmp_path):
    d = tmp_path / "ev"
    d.mkdir()
    bench = d / "questions.jsonl"  # the benchmark named as eval's own product input, inside -o
    shutil.copy(TEST, bench)
    kept = _snapshot(d)
    for flag in ("--resume", "--force"):
        r = cli("eval", bench, "-o", d, "-m", tiny_model, "-b", "hf", "--no-progress", flag)
        assert r.returncode == 4, r.stderr
        assert _first_line(r).startswith(f"error: eval: the benchmark file {bench} is"), r.stderr
        assert _snapshot(d) == kept

    mine = tmp_path / "mine"  # a folder of the user's own reports: --resume has nothing to continue there
    mine.mkdir()
    (mine / "report.md").write_text("# my report\n")
    (mine / "report.json").write_text('{"mine": true}\n')
    kept = _snapshot(mine)
    r = cli("eval", TEST, "-o", mine, "-m", tiny_model, "-b", "hf", "--no-progress", "--resume")
    assert r.returncode == 4, r.stderr
    assert _first_line(r).startswith(f"error: eval --resume: {mine} holds no eval job to continue"), r.stderr
    assert _snapshot(mine) == kept


def test_a_refused_second_eval_leaves_the_running_evals_questions(tiny_model, tmp_path):
    from openjev_batch.pipeline.output.store import OutputStore

    d = tmp_path / "ev"
    d.mkdir()
    (d / "questions.jsonl").write_text('{"id": "running eval"}\n')
    running = OutputStore(d / "predictions.parquet")  # the running eval's job: holds the lock
    try:
        kept = _snapshot(d)
        for flag in ("--resume", "--force"):
            r = cli(
                "eval", TEST, "-o", d, "-m", tiny_model, "-b", "hf", "--no-progress", "--sample", "3", flag
            )
            assert r.returncode == 4, r.stderr
            assert _first_line(r).startswith("error: another job is writing"), r.stderr
            assert _snapshot(d) == kept
    finally:
        running.release()


@pytest.mark.parametrize("removed", ["partial", "folder"])
def test_a_partial_or_output_folder_removed_mid_job_is_one_line_naming_it(hf_backend, tmp_path, removed):
    """Issue 34.18: OUT.partial or the output's folder removed while the job ran gave pyarrow's "Failed to
    open local file '….part-000002-….tmp'" (or a bare path); now one OutputGoneError naming the folder (the
    CLI's `error:` line, exit 4)."""
    from openjev_batch.config import build_config
    from openjev_batch.errors import OutputGoneError
    from openjev_batch.pipeline.job import run_job

    src = tmp_path / "in.jsonl"
    write_jsonl(src, _rows(8))
    out = tmp_path / "out" / "sub" / "o.parquet"
    out.parent.mkdir(parents=True)
    partial = out.with_name(out.name + ".partial")
    gone = partial if removed == "partial" else tmp_path / "out"
    cfg = build_config(input=src, output=out, model="-", backend="hf", chunk_rows=2, progress=False)
    events = []

    def remove(n, total):
        events.append(n)
        if len(events) == 3:  # after the first chunk's part, before the last one's
            shutil.rmtree(gone)

    where = str(partial) if removed == "partial" else f"the output's folder {gone}"
    with pytest.raises(OutputGoneError) as e:
        run_job(cfg, backend=hf_backend, on_progress=remove)
    assert str(e.value) == f"{where} was removed while the job ran; its finished chunks are gone: rerun the job"
