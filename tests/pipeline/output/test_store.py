"""The output store (issue #16): one job owns its output, resume identifies the input by content, kept types
do not depend on chunking, only the store's own files are deleted, empty input is refused early."""

import json
import os
import shutil
import signal
import subprocess
import sys

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT, cli, start_cli, wait_parts, write_jsonl

from openjev_batch.config import build_config
from openjev_batch.errors import BackendError, ConfigError, OutputBusyError, OutputCheckError
from openjev_batch.pipeline import run_job
from openjev_batch.pipeline.output.store import OutputStore

Q = {"u": {"type": "noul", "instructions": "Urgent?"}}


def _rows(n, prefix="r", **extra):
    return [{"id": f"{prefix}{i}", "state": f"ticket number {i}", "questions": Q, **extra} for i in range(n)]


def _cfg(inp, out, **kw):
    return build_config(input=inp, output=out, model="-", backend="hf", progress=False, **kw)


class DiesAt:
    """The real hf backend whose engine 'dies' on the window holding row `bad` (ends the job, keeps the
    partial): the way to leave a partial behind without a subprocess."""

    def __init__(self, inner, bad):
        self.inner, self.bad = inner, bad

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def prefill(self, window):
        if any(r.row_id == self.bad for r in window.rows):
            raise BackendError("sglang engine failed: scheduler died (injected)")
        return self.inner.prefill(window)

    def check_alive(self):
        raise BackendError("scheduler died (injected)")


# -- 1. one job owns its output ---------------------------------------------------------------------------
def test_a_second_store_on_the_same_output_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "o.parquet"
    with OutputStore(out):
        with pytest.raises(
            OutputBusyError, match=rf"another job is writing .*o.parquet \(pid {os.getpid()} on host"
        ):
            OutputStore(out)
    with OutputStore(out):  # released: free again
        pass


def test_a_killed_job_never_leaves_the_lock_stuck(tmp_path):
    out = tmp_path / "o.parquet"
    code = (
        "import sys, time; from openjev_batch.pipeline.output.store import OutputStore; "
        f"s = OutputStore({str(out)!r}); print('locked', flush=True); time.sleep(600)"
    )
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    with pytest.raises(OutputBusyError, match=f"pid {p.pid}"):
        OutputStore(out)
    p.kill()
    p.wait()
    with OutputStore(out, resume=True):  # the kernel dropped the flock with the process
        pass


def test_two_cli_jobs_on_one_output_the_second_is_refused_at_start(tiny_model, tmp_path):
    """The fault trial's case: job B on job A's -o. B must stop at once naming A (exit 4); A's output holds
    only A's rows."""
    # A must still be running when B starts: 400 rows (B's start takes seconds; A on 1 thread writes ~10 rows/s)
    a_in = write_jsonl(tmp_path / "a.jsonl", _rows(400, "a"))
    b_in = write_jsonl(tmp_path / "b.jsonl", _rows(40, "b"))
    out = tmp_path / "o.parquet"
    args = ["-m", tiny_model, "-b", "hf", "-o", out, "--chunk-rows", "2", "--no-progress"]
    a = start_cli("run", a_in, *args)
    wait_parts(tmp_path / "o.parquet.partial", a, 1, timeout=300)
    b = cli("run", b_in, *args)
    _, a_err = a.communicate(timeout=600)
    assert b.returncode == 4, b.stderr
    assert f"(pid {a.pid} on host" in " ".join(b.stderr.split()) and "another job is writing" in b.stderr
    assert a.returncode == 0, a_err
    ids = pl.read_parquet(out)["id"].to_list()
    assert ids == [f"a{i}" for i in range(400)]


def _store_with_parts(tmp_path, name, n=2):
    s = OutputStore(tmp_path / name)
    for i in range(n):
        s.begin_chunk(i, 1, 1, f"h{i}")
        s.write(i, [_record(f"{name}{i}")])
    return s


def _record(rid):
    from openjev_batch.readouts.label_logprobs import OUTPUT_SCHEMA

    return {**dict.fromkeys(OUTPUT_SCHEMA.names), "id": rid, "error": "x"}


def test_the_join_refuses_a_part_of_another_job(tmp_path):
    a = _store_with_parts(tmp_path, "a.parquet")
    b = _store_with_parts(tmp_path, "b.parquet")
    shutil.copy(b.part(1), a.part(1))  # same name, same record count, another job's part
    with pytest.raises(OutputCheckError, match="was not written by this job"):
        a.close()
    b.close()
    assert pl.read_parquet(tmp_path / "b.parquet")["id"].to_list() == ["b.parquet0", "b.parquet1"]
    a.release()
    (a.partial / "part-000009.parquet").write_bytes(b"")  # a part no chunk of this run has
    a2 = OutputStore(tmp_path / "a.parquet", resume=True)
    for i in range(2):
        a2.begin_chunk(i, 1, 1, f"h{i}")
    with pytest.raises(OutputCheckError, match="count check failed"):
        a2.close()
    a2.release()


# -- 5. resume identifies the input by content -------------------------------------------------------------
def test_resume_refuses_a_same_size_same_mtime_change_and_resumes_a_touched_copy(hf_backend, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(6))
    out = tmp_path / "o.parquet"
    with pytest.raises(BackendError):
        run_job(_cfg(inp, out, chunk_rows=2), backend=DiesAt(hf_backend, "r5"))
    parts = sorted(p.name for p in (tmp_path / "o.parquet.partial").glob("part-*"))
    assert parts == ["part-000000.parquet", "part-000001.parquet"]
    original, st = inp.read_bytes(), inp.stat()
    changed = original.replace(b"ticket number 1", b"ticket number 9")  # row r1, in finished chunk 0
    assert len(changed) == len(original)
    inp.write_bytes(changed)
    os.utime(inp, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert inp.stat().st_size == st.st_size and inp.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(ConfigError, match="the input changed since .* at input chunk 0"):
        run_job(_cfg(inp, out, chunk_rows=2, resume=True), backend=hf_backend)
    # a re-copied identical file (new mtime) at another path resumes and finishes the job
    copy = tmp_path / "copy" / "in.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(original)
    s = run_job(_cfg(copy, out, chunk_rows=2, resume=True), backend=hf_backend)
    assert s.answered == 6
    ref = tmp_path / "ref.parquet"
    run_job(_cfg(copy, ref, chunk_rows=2), backend=hf_backend)
    assert pl.read_parquet(out).equals(pl.read_parquet(ref))


def test_resume_refuses_an_input_that_shrank(hf_backend, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(6))
    out = tmp_path / "o.parquet"
    with pytest.raises(BackendError):
        run_job(_cfg(inp, out, chunk_rows=2), backend=DiesAt(hf_backend, "r5"))
    write_jsonl(inp, _rows(2))
    with pytest.raises(ConfigError, match="it ends before input chunk 1"):
        run_job(_cfg(inp, out, chunk_rows=2, resume=True), backend=hf_backend)


# -- 6. kept types do not depend on chunking ---------------------------------------------------------------
def test_kept_column_types_do_not_depend_on_chunk_size(hf_backend, tmp_path):
    vals = [1, 2, 3, 4, 5, 6.5, 7, 8, 9, 10]
    rows = [
        {**r, "x": v, "nested": {"a": [i]} if i < 5 else {"a": [0.5], "b": "s"}, "mixed": v if i else "t"}
        for i, (r, v) in enumerate(zip(_rows(10), vals, strict=True))
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    keep = ("x", "nested", "mixed")
    tables = {}
    for n in (5, 1000):
        out = tmp_path / f"o{n}.parquet"
        run_job(_cfg(inp, out, chunk_rows=n, keep=keep), backend=hf_backend)
        tables[n] = pq.read_table(out)
    assert tables[5].schema == tables[1000].schema
    assert tables[5].select(keep).equals(tables[1000].select(keep))
    schema = tables[5].schema
    assert schema.field("x").type == pa.float64()
    assert schema.field("nested").type == pa.struct([("a", pa.list_(pa.float64())), ("b", pa.string())])
    assert schema.field("mixed").type == pa.string()  # "t" and numbers: no common type, JSON text
    assert tables[5].column("mixed").to_pylist()[:2] == ["t", "2"]


def test_parquet_kept_columns_keep_the_input_types(hf_backend, tmp_path):
    t = pa.table(
        {
            "id": [f"r{i}" for i in range(4)],
            "state": ["a", "b", "c", "d"],
            "questions": [json.dumps(Q)] * 4,
            "n": pa.array([None, None, 3, 4], pa.int32()),  # chunk 0 all null
        }
    )
    inp = tmp_path / "in.parquet"
    pq.write_table(t, inp)
    for n in (2, 100):
        out = tmp_path / f"o{n}.parquet"
        run_job(_cfg(inp, out, chunk_rows=n, keep=("n",)), backend=hf_backend)
        assert pq.read_schema(out).field("n").type == pa.int32()
        assert pq.read_table(out).column("n").to_pylist() == [None, None, 3, 4]


# -- 7. only the store's own files are deleted or overwritten ---------------------------------------------
def test_a_run_deletes_and_overwrites_only_files_it_created(hf_backend, tmp_path):
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    earlier = OutputStore(out)  # an earlier job on this output, stopped: its manifest, ledger and part
    earlier.begin_chunk(7, 1, 1, "h7")
    earlier.write(7, [_record("old")])
    earlier.release()
    notes = partial / "notes.txt"  # a user's file inside OUT.partial/
    notes.write_text("the user's notes")
    # (a file with the store's name that no earlier job wrote is refused: test_store_safety.py)
    inside = write_jsonl(partial / "in.jsonl", _rows(3))
    with pytest.raises(ConfigError, match="inside o.parquet.partial"):  # the job would clear its own input
        run_job(_cfg(inside, out, chunk_rows=2), backend=hf_backend)
    inside.unlink()
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(3))
    user_tmp = tmp_path / "o.parquet.tmp"
    user_tmp.write_text("the user's file")
    s = run_job(_cfg(inp, out, chunk_rows=2), backend=hf_backend)
    assert s.answered == 3 and pl.read_parquet(out).height == 3
    assert inp.exists() and user_tmp.read_text() == "the user's file"
    assert sorted(p.name for p in partial.iterdir()) == ["notes.txt"]  # its own files gone, the user's kept


def _not_a_model(tmp_path):
    """A model folder that passes the name check (it has a config.json) but has no weights or tokenizer:
    loading it would fail with another error, so a refusal naming the input came before the model loaded."""
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}')
    return model


# -- 9. an empty input is refused before the model loads ---------------------------------------------------
@pytest.mark.parametrize("kind", ["blank.jsonl", "zero.parquet"])
def test_an_input_without_rows_is_refused_before_the_model_loads(tmp_path, kind):
    inp = tmp_path / kind
    if kind.endswith(".jsonl"):
        inp.write_text("\n  \n\n")
    else:
        pq.write_table(pa.table({"id": pa.array([], pa.string()), "state": pa.array([], pa.string())}), inp)
    model = _not_a_model(tmp_path)
    r = cli("run", inp, "-m", model, "-b", "hf", "-o", tmp_path / "o.parquet", "--no-progress")
    assert r.returncode == 4 and f"{inp}: no rows" in r.stderr, r.stderr  # refused before the model loads
    assert not (tmp_path / "o.parquet.partial").exists()


def _input(path, rows):
    if path.suffix == ".jsonl":
        return write_jsonl(path, rows)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("kind", ["in.jsonl", "in.parquet"])
def test_an_input_without_questions_is_refused_before_the_model_loads(tmp_path, kind):
    """Issue 34.4: rows without `questions` and no -q loaded the model and wrote a file of errors (exit 3)."""
    inp = _input(tmp_path / kind, [{"id": f"r{i}", "state": f"ticket {i}"} for i in range(3)])
    model = _not_a_model(tmp_path)
    r = cli("run", inp, "-m", model, "-b", "hf", "-o", tmp_path / "o.parquet", "--no-progress")
    assert r.returncode == 4 and "no questions" in r.stderr and "--questions" in r.stderr, r.stderr
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.parquet.partial").exists()
    v = cli("validate", inp)  # validate finds the same, as a job error
    assert v.returncode == 4 and "no questions" in v.stderr, v.stderr


@pytest.mark.parametrize("kind", ["in.jsonl", "in.parquet"])
def test_an_input_without_a_state_column_is_refused_naming_its_columns(tmp_path, kind):
    """A new-user trial: rows whose text was under `body` loaded the model and wrote a file of `state: missing`
    errors (exit 3). Refused before the model loads, naming the columns the rows have."""
    inp = _input(tmp_path / kind, [{"id": f"r{i}", "body": f"ticket {i}"} for i in range(3)])
    (tmp_path / "q.yaml").write_text("u:\n  type: noul\n  instructions: Is it urgent?\n")
    model = _not_a_model(tmp_path)
    for r in (cli("run", inp, "-q", tmp_path / "q.yaml", "-m", model, "-b", "hf", "-o", tmp_path / "o.parquet"),
              cli("validate", inp, "-q", tmp_path / "q.yaml")):  # fmt: skip
        assert r.returncode == 4 and "no state: no row has a `state` field (the rows have: id, body)" in r.stderr
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.parquet.partial").exists()


# -- 4. SIGTERM behaves like Ctrl-C (hf) --------------------------------------------------------------------
@pytest.mark.parametrize(
    "sig,code,word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")]
)
def test_sigterm_and_sigint_keep_the_partial_and_exit_with_a_message(tiny_model, tmp_path, sig, code, word):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(40))
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    args = ["run", inp, "-m", tiny_model, "-b", "hf", "-o", out, "--chunk-rows", "2", "--no-progress"]
    p = start_cli(*args)
    wait_parts(partial, p, 2, timeout=300)
    p.send_signal(sig)
    _, stderr = p.communicate(timeout=120)
    assert p.returncode == code, stderr
    assert word in stderr and "--resume" in stderr and "Traceback" not in stderr
    assert not out.exists() and len(list(partial.glob("part-*.parquet"))) >= 2
    r = cli(*args, "--resume")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out)["id"].to_list() == [f"r{i}" for i in range(40)]


# -- 8. determinism: exactly what the README claims ---------------------------------------------------------
def _probs(path):
    return pl.read_parquet(path).select("id", "question_id", "answer", "probs")


def test_hf_on_the_cpu_is_byte_identical_run_to_run_and_across_chunking(hf_backend, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(7))
    outs = []
    for i, n in enumerate((2, 2, 1000)):
        outs.append(tmp_path / f"o{i}.parquet")
        run_job(_cfg(inp, outs[-1], chunk_rows=n), backend=hf_backend)
    assert _probs(outs[0]).equals(_probs(outs[1])) and _probs(outs[0]).equals(_probs(outs[2]))


@pytest.mark.sglang
def test_sglang_on_the_cpu_gives_the_same_answers_and_probs_within_1e_6(sglang_backend, tmp_path):
    """The CPU engine is not bit-reproducible (batch composition changes the reduction order; sglang's
    enable_deterministic_inference needs GPU batch-invariant kernels and turns the radix cache off on this
    attention backend): the README promises answers and probabilities within 1e-6, which this checks."""
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(12))
    runs = []
    for i, n in enumerate((3, 1000)):
        out = tmp_path / f"s{i}.parquet"
        cfg = build_config(input=inp, output=out, model="-", backend="sglang", progress=False, chunk_rows=n)
        run_job(cfg, backend=sglang_backend)
        runs.append(_probs(out))
    a, b = runs
    assert a.select("id", "question_id", "answer").equals(b.select("id", "question_id", "answer"))
    diff = max(
        abs(x - y)
        for pa_, pb_ in zip(a["probs"], b["probs"], strict=True)
        for x, y in zip(pa_, pb_, strict=True)
    )
    assert diff <= 1e-6, diff


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_job_exits_non_zero_after_its_stderr_reader_has_gone(tiny_model, tmp_path, sig, code):
    """Issue 34.1: a log shipper (`| tee log`) that died before the job was stopped left the stop message
    nowhere to go, and the broken pipe on stderr turned exit 143 into 0: a failed night recorded as a
    success."""
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(40))
    out = tmp_path / "o.parquet"
    partial = tmp_path / "o.parquet.partial"
    p = start_cli("run", inp, "-m", tiny_model, "-b", "hf", "-o", out, "--chunk-rows", "2")
    wait_parts(partial, p, 2, timeout=300)
    p.stderr.close()  # stderr's reader is gone: the job's next write to it gets EPIPE
    p.send_signal(sig)
    assert p.wait(timeout=120) == code
    assert not out.exists() and len(list(partial.glob("part-*.parquet"))) >= 2


def test_a_job_with_row_errors_exits_3_with_no_reader_of_stderr(tiny_model, tmp_path):
    """The summary written to a closed stderr does not turn the job's exit 3 into 0 (issue 34.1)."""
    inp = write_jsonl(tmp_path / "in.jsonl", [*_rows(2), {"id": "bad", "questions": Q}])  # no `state`
    out = tmp_path / "o.parquet"
    p = start_cli("run", inp, "-m", tiny_model, "-b", "hf", "-o", out)
    p.stderr.close()
    assert p.wait(timeout=300) == 3
    assert pl.read_parquet(out)["id"].to_list() == ["r0", "r1", "bad"]
