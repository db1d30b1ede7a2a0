"""A broken backend ends the job once, clearly (exit 4, partial kept); a row that breaks the backend stays a
row error (exit 3). The real `run` command in-process (typer's runner, so a backend can be plugged in), the
real pipeline and the real hf backend on the tiny model, with faults injected in `prefill`."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import write_jsonl
from typer.testing import CliRunner

from openjev_batch.backends.hf.causal import HFBackend
from openjev_batch.cli import app
from openjev_batch.errors import BackendError
from openjev_batch.pipeline.prefill import BROKEN_AFTER_ROWS, FailureTracker
from openjev_batch.pipeline.runners import local as pipeline  # where the job loads its backend
from openjev_batch.pipeline.summary import top_errors

QUESTIONS = {
    "u": {"type": "noul", "instructions": "Is it urgent?"},
    "c": {"type": "choice", "instructions": "Channel?", "criteria": {"mail": None, "phone": None}},
}


def _rows(n: int) -> list[dict]:
    return [
        {"id": f"r{i}", "state": f"ticket {i}: my order {i * 7} is late", "questions": QUESTIONS}
        for i in range(n)
    ]


class Broken(HFBackend):
    """The real hf backend whose every call fails the way transformers 5.20+ failed the old crop-based
    reuse (the number differs per row, as it did)."""

    seen: list[list[str]] = []

    def prefill(self, window):
        Broken.seen.append([r.row_id for r in window.rows])
        raise ValueError(
            f"Calling crop with a positive value ({len(window.rows[0].prefix)}) is not supported. "
            "Please use a negative integer"
        )


class FailsOnOneRow(HFBackend):
    """The real hf backend, failing every call whose window holds row r5 (a row that breaks the engine)."""

    def prefill(self, window):
        if any(r.row_id == "r5" for r in window.rows):
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB (injected)")
        return super().prefill(window)


def _run(monkeypatch, backend_cls, *args):
    monkeypatch.setattr(pipeline, "load_backend", lambda name, opts, kind="label-logprobs": backend_cls(opts))
    return CliRunner().invoke(app, ["run", *map(str, args), "--no-progress"])


def test_broken_backend_ends_the_job_in_the_first_window_and_resumes(monkeypatch, tiny_model, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(24))
    out = tmp_path / "o.parquet"
    args = (inp, "-m", tiny_model, "-b", "hf", "-o", out, "--max-branches", "16")  # 8 rows per window
    Broken.seen = []
    r = _run(monkeypatch, Broken, *args)
    assert r.exit_code == 4, r.output
    msg = " ".join(r.output.split())  # rich wraps at the runner's 80 columns
    assert msg.count("error:") == 1 and "backend itself is broken" in msg
    assert "ValueError: Calling crop with a positive value (" in msg
    assert "--resume" not in msg  # no chunk was finished: nothing to resume (issue 25)
    first = set(Broken.seen[0])
    assert len(first) == 8 and all(set(w) <= first for w in Broken.seen)  # never left the first window
    assert sum(len(w) == 1 for w in Broken.seen) == BROKEN_AFTER_ROWS  # stopped at the third single row
    assert not out.exists()  # nothing claimed answered
    assert not (tmp_path / "o.parquet.partial").exists()
    # --resume with nothing to resume runs the whole job: with a working backend it completes
    ok = _run(monkeypatch, HFBackend, *args, "--resume")
    assert ok.exit_code == 0, ok.output
    df = pl.read_parquet(out)
    assert df.height == 48 and df["error"].null_count() == 48


class BrokenAfterFirstChunk(HFBackend):
    """The real hf backend that breaks (the same way on every row) once the first chunk, r0–r7, is done."""

    def prefill(self, window):
        if any(int(r.row_id[1:]) >= 8 for r in window.rows):
            raise ValueError(f"Calling crop with a positive value ({len(window.rows[0].prefix)})")
        return super().prefill(window)


def test_broken_backend_offers_resume_only_with_a_finished_chunk(monkeypatch, tiny_model, tmp_path):
    """The message said "finished chunks are kept in X.partial: rerun with --resume" also when no chunk was
    written and no partial exists (the test above); it says so when a chunk is in the partial."""
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(24))
    out = tmp_path / "o.parquet"
    r = _run(
        monkeypatch, BrokenAfterFirstChunk, inp, "-m", tiny_model, "-b", "hf", "-o", out, "--chunk-rows", "8"
    )
    assert r.exit_code == 4, r.output
    msg = " ".join(r.output.split())
    assert "backend itself is broken" in msg
    squeezed = "".join(r.output.split())  # rich wraps at the runner's 80 columns, also inside the path
    assert f"(finishedchunksarekeptin{out}.partial:rerunwith--resume)" in squeezed
    assert [p.name for p in (tmp_path / "o.parquet.partial").glob("part-*")] == ["part-000000.parquet"]


def test_one_bad_row_stays_a_row_error(monkeypatch, tiny_model, tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", _rows(12))
    out = tmp_path / "o.parquet"
    r = _run(monkeypatch, FailsOnOneRow, inp, "-m", tiny_model, "-b", "hf", "-o", out)
    assert r.exit_code == 3, r.output
    df = pl.read_parquet(out)
    bad = df.filter(pl.col("error").is_not_null())
    assert bad["id"].to_list() == ["r5", "r5"] and bad["question_id"].to_list() == ["u", "c"]
    assert df.filter(pl.col("id") != "r5")["error"].null_count() == 22
    cause = "RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB (injected)"
    assert bad["error"].to_list() == [f"row r5: questions.u: {cause}", f"row r5: questions.c: {cause}"]
    # the summary names the error with its count, once per distinct error
    text = " ".join(r.output.split())
    assert f"1 × questions.u: {cause} (e.g. row r5)" in text
    assert f"1 × questions.c: {cause} (e.g. row r5)" in text


def test_tracker_needs_three_different_rows_in_a_row():
    t = FailureTracker("hf")
    e = lambda n: RuntimeError(f"boom at {n}")  # noqa: E731
    t.row_failed((1,), e(1))
    t.row_failed((1,), e(2))  # the same conversation again: not new evidence
    t.row_failed((2,), e(3))
    t.succeeded()  # a call in between worked: the rows were the problem
    t.row_failed((3,), e(4))
    t.row_failed((4,), ValueError("other"))  # another error: a new streak
    t.row_failed((5,), ValueError("other"))
    with pytest.raises(BackendError, match=r"3 rows in a row.*ValueError: other"):
        t.row_failed((6,), ValueError("other"))


def test_top_errors_group_the_same_fault_across_rows():
    import pyarrow as pa

    ids = ["a", "b: c", None, "d", None, "e"]
    errors = [
        "row a: questions.x: branch has 40,210 tokens, limit 32,768",
        "row b: c: questions.x: branch has 40,210 tokens, limit 32,768",  # an id holding ': '
        "row at index 2: line 3: not valid JSON",
        None,
        "row at index 4: line 5: not valid JSON",
        "row e: questions.x: branch has 40,210 tokens, limit 32,768",
    ]
    got = top_errors(pa.table({"id": ids, "error": errors}))
    assert got[0] == (3, "questions.x: branch has 40,210 tokens, limit 32,768", "row a")
    # line numbers differ, so the two unreadable lines are two distinct errors
    assert got[1:] == (
        (1, "line 3: not valid JSON", "row at index 2"),
        (1, "line 5: not valid JSON", "row at index 4"),
    )
    assert top_errors(pa.table({"id": ids, "error": errors}), n=1) == got[:1]
