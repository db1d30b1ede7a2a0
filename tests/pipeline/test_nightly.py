"""Nightly-job guarantees: resumable after SIGKILL, window faults isolated, no exception escapes on any input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import EXAMPLES, ROOT, cli, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openjev_batch.backends import BackendError
from openjev_batch.config import build_config
from openjev_batch.core import RowError
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.pipeline.job import run_job
from openjev_batch.readouts.label_logprobs.rows import Row, parse_row


def test_sigkill_then_resume_equals_uninterrupted_run(tiny_model, tmp_path):
    args = [
        EXAMPLES / "tickets.jsonl",
        "-q",
        EXAMPLES / "ticket_questions.yaml",
        "-m",
        tiny_model,
        "-b",
        "hf",
        "--keep",
        "channel",
        "--chunk-rows",
        "2",
        "--no-progress",
    ]
    ref = tmp_path / "ref.parquet"
    assert cli("run", *args, "-o", ref).returncode == 0
    out = tmp_path / "out.parquet"
    partial = tmp_path / "out.parquet.partial"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    p = subprocess.Popen(
        [sys.executable, "-m", "openjev_batch", "run", *map(str, args), "-o", str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while len(list(partial.glob("part-*.parquet"))) < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    n_parts = len(list(partial.glob("part-*.parquet")))
    assert not out.exists() and 3 <= n_parts < 12, n_parts  # killed mid-job: no target file, parts kept
    r = cli("run", *args, "-o", out, "--resume")
    assert r.returncode == 0, r.stderr
    assert pl.read_parquet(out).equals(pl.read_parquet(ref))
    assert not partial.exists()


def test_resume_refuses_a_partial_from_another_job(tiny_model, tmp_path):
    out = tmp_path / "o.parquet"
    (tmp_path / "o.parquet.partial").mkdir()
    (tmp_path / "o.parquet.partial" / "manifest.json").write_text(json.dumps({"input": "other"}))
    r = cli("run", EXAMPLES / "tickets_inline.jsonl", "-m", tiny_model, "-b", "hf", "-o", out, "--resume")
    assert r.returncode == 4 and "made by a different job" in r.stderr


class FlakyBackend:
    """The real hf backend, failing any window that contains row `bad` (an engine fault on that row)."""

    def __init__(self, inner, bad):
        self.inner, self.bad, self.calls = inner, bad, 0

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def prefill(self, window):
        self.calls += 1
        if any(r.row_id == self.bad for r in window.rows):
            raise RuntimeError("CUDA out of memory (injected)")
        return self.inner.prefill(window)


def test_window_fault_is_split_and_isolated_to_one_row(hf_backend, tmp_path):
    rows = [
        {
            "id": f"r{i}",
            "state": f"ticket number {i}",
            "questions": {"u": {"type": "noul", "instructions": "Urgent?"}},
        }
        for i in range(8)
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    cfg = build_config(input=inp, output=tmp_path / "o.parquet", model="-", backend="hf", progress=False)
    flaky = FlakyBackend(hf_backend, "r5")
    s = run_job(cfg, backend=flaky)
    df = pl.read_parquet(tmp_path / "o.parquet")
    assert s.answered == 7 and s.errors == 1 and flaky.calls > 2
    bad = df.filter(pl.col("id") == "r5")
    assert bad["error"][0] == "row r5: questions.u: RuntimeError: CUDA out of memory (injected)"
    good = run_job(
        build_config(input=inp, output=tmp_path / "g.parquet", model="-", backend="hf", progress=False),
        backend=hf_backend,
    )
    assert good.errors == 0
    ref = pl.read_parquet(tmp_path / "g.parquet").filter(pl.col("id") != "r5")
    assert df.filter(pl.col("id") != "r5")["probs"].to_list() == ref["probs"].to_list()


def test_dead_engine_ends_the_job_and_keeps_the_partial(hf_backend, tmp_path):
    class Dead(FlakyBackend):
        def check_alive(self):
            raise BackendError("sglang engine failed: scheduler died")

    inp = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": f"r{i}", "state": "x", "questions": {"u": {"type": "noul", "instructions": "Urgent?"}}}
            for i in range(4)
        ],
    )
    cfg = build_config(
        input=inp, output=tmp_path / "o.parquet", model="-", backend="hf", chunk_rows=2, progress=False
    )
    with pytest.raises(BackendError, match="scheduler died"):
        run_job(cfg, backend=Dead(hf_backend, "r3"))
    assert not (tmp_path / "o.parquet").exists()
    assert [p.name for p in (tmp_path / "o.parquet.partial").glob("part-*")] == ["part-000000.parquet"]


def test_duplicate_option_names_and_keys(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(
        '{"id": "a", "state": "x", "questions": {"c": {"type": "choice", "instructions": "?", '
        '"criteria": {"x": null, "x": "again"}}}}\n'
    )
    (r,) = [r for c in read_rows(p) for r in c]
    assert isinstance(r, RowError) and r.error == "row at index 0: line 1: duplicate key 'x' in a JSON object"
    q = parse_row(
        0,
        {
            "id": "m",
            "state": "x",
            "questions": {
                "c": {"type": "choice", "instructions": "?", "criteria": [("x", None), ("x", "y")]}
            },
        },
    )
    assert q.questions[0].error == "row m: questions.c.criteria: duplicate option name 'x'"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=10,
)
states = st.one_of(
    json_values,
    st.text(),
    st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant", "system", "bot"]),
                "content": json_values | st.text(),
            }
        )
    ),
)
questions = st.one_of(
    json_values,
    st.dictionaries(
        st.text(max_size=4),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(["noul", "choice", "score", "x"]),
                "instructions": st.text(max_size=5),
                "criteria": json_values,
            }
        ),
        max_size=3,
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["id", "state", "questions", "other"]), json_values, max_size=4),
    states,
    questions,
)
def test_any_record_parses_to_a_row_or_a_row_error(rec, state, qs):
    for r in (rec, {**rec, "state": state, "questions": qs}):
        out = parse_row(0, r)
        assert isinstance(out, Row | RowError)
        if isinstance(out, RowError):  # the error names the row: by id, or by index when it has none
            name = f"row {out.id}: " if out.id is not None else "row at index 0: "
            assert out.error.startswith(name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=30), st.builds(json.dumps, json_values)), min_size=1, max_size=6))
def test_any_jsonl_lines_yield_rows_or_errors(tmp_path, lines):
    p = tmp_path / "h.jsonl"
    lines = [x.replace("\n", " ").replace("\r", " ") for x in lines]
    p.write_text("\n".join(lines) + "\n{}\n", encoding="utf-8")
    got = [r for c in read_rows(p) for r in c]
    assert all(isinstance(r, Row | RowError) for r in got)
    assert (
        len(got) == sum(1 for x in lines if x.encode().strip()) + 1
    )  # every non-blank line is one output row


def test_job_manifest_names_the_numbers_not_the_paths(tmp_path, monkeypatch):
    """--resume must refuse a different dtype (one file, two precisions) but accept the same questions by
    another path or as a byte-identical copy."""
    from openjev_batch.pipeline.loop import job_manifest

    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    q = tmp_path / "q.yaml"
    q.write_text('u: {type: noul, instructions: "Urgent?"}\n')  # the manifest holds the parsed readout's key
    copy = tmp_path / "sub" / "q.yaml"
    copy.parent.mkdir()
    copy.write_bytes(q.read_bytes())
    monkeypatch.chdir(tmp_path)

    def manifest(**kw):
        base = dict(input=inp, output=tmp_path / "o.parquet", model="m", backend="hf", progress=False)
        return job_manifest(build_config(**{**base, **kw}))

    same = [manifest(questions=p) for p in (Path("q.yaml"), q, copy)]
    assert same[0] == same[1] == same[2]
    assert manifest(questions=q, dtype="bfloat16") != same[0]
    assert manifest(questions=q, device="cpu") != same[0]
    assert manifest(questions=q, tp_size=2, backend="sglang") != manifest(
        questions=q, backend="sglang"
    )
    sg = manifest(questions=q, backend="sglang")
    assert manifest(questions=q, backend="sglang", engine_args={"attention_backend": "triton"}) != sg
    q.write_text('u: {type: noul, instructions: "Angry?"}\n')
    assert manifest(questions=q) != same[0]
