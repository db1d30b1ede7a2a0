"""One job loop for every readout: `run` (label-logprobs) and `classify` (classifier-head) share resume,
split-on-failure, `--dry-run`, `validate` and the output store; each test runs over both readouts
(`--ray` over both: tests/test_scaleout.py)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import cli, write_jsonl

from openjev_batch.config import build_config
from openjev_batch.pipeline.job import run_job

Q = {"u": {"type": "noul", "instructions": "Urgent?"}, "c": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high"]}}  # fmt: skip
PREMISES = ["A man is eating pasta.", "The cat sat on the mat.", "Prices rose in May."]


def rows_for(readout: str, n: int = 9) -> list[dict]:
    if readout == "label-logprobs":
        return [{"id": f"r{i}", "state": f"ticket {PREMISES[i % 3]}", "questions": Q} for i in range(n)]
    return [{"id": f"r{i}", "premise": PREMISES[i % 3], "hypothesis": f"Claim number {i}."} for i in range(n)]


READOUTS = ["label-logprobs", "classifier-head"]
RECORDS = {"label-logprobs": 2, "classifier-head": 1}  # output rows per input row


@pytest.fixture(params=READOUTS)
def job(request, tmp_path):
    """(readout, its backend, config builder) over one 9-row input."""
    readout = request.param
    backend = request.getfixturevalue("hf_backend" if readout == "label-logprobs" else "hf_cls")
    src = write_jsonl(tmp_path / "in.jsonl", rows_for(readout))

    def config(out: str, **kw):
        return build_config(
            input=src, output=tmp_path / out, model="-", backend="hf", readout=readout, progress=False, **kw
        )

    return readout, backend, config


def test_interrupted_then_resumed_equals_uninterrupted(job, tmp_path):
    readout, backend, config = job
    ref = run_job(config("ref.parquet", chunk_rows=3), backend=backend)
    calls = []

    def stop_in_chunk_two(branches: int, tokens: int) -> None:
        calls.append(branches)
        if len(calls) == 2:
            raise KeyboardInterrupt

    cfg = config("out.parquet", chunk_rows=3)
    with pytest.raises(KeyboardInterrupt):
        run_job(cfg, backend=backend, on_progress=stop_in_chunk_two)
    partial = tmp_path / "out.parquet.partial"
    assert not (tmp_path / "out.parquet").exists()
    assert [p.name for p in partial.glob("part-*")] == ["part-000000.parquet"]
    s = run_job(cfg.model_copy(update={"resume": True}), backend=backend)
    assert pq.read_table(tmp_path / "out.parquet").to_pylist() == pq.read_table(ref.output).to_pylist()
    assert (s.rows, s.questions, s.answered, s.errors) == (9, 9 * RECORDS[readout], 9 * RECORDS[readout], 0)
    assert s.branch_tokens == ref.branch_tokens  # the resumed chunk counts from its part
    assert not partial.exists()


def test_resume_refuses_a_partial_of_the_other_readout(tmp_path, hf_backend, hf_cls):
    """The readout is part of the resume key: a classify partial never continues a run, nor the reverse."""
    # two one-row chunks, stopped in the second: the first chunk's part is on disk (a job that wrote
    # nothing leaves no partial, pipeline/output/store.py), so there is a partial to refuse
    rows = [{"id": i, "text": "x", "state": "x", "questions": Q} for i in ("a", "b")]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.parquet"
    partial = out.with_name(out.name + ".partial")
    seen = []

    def stop(*_):
        seen.append(1)
        if len(seen) > 1:
            raise KeyboardInterrupt

    run = build_config(input=src, output=out, model="-", backend="hf", progress=False, chunk_rows=1)
    with pytest.raises(KeyboardInterrupt):
        run_job(run, backend=hf_backend, on_progress=stop)
    assert partial.exists()
    cls = build_config(input=src, output=out, model="-", backend="hf", readout="classifier-head", resume=True)
    with pytest.raises(Exception, match=r"made by a different job \(differs in: .*readout"):
        run_job(cls, backend=hf_cls)


class FailOnRow:
    """The real backend, failing any window that holds row `bad` (an engine fault on that one row)."""

    def __init__(self, inner, bad: str):
        self.inner, self.bad, self.calls = inner, bad, 0

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def prefill(self, window):
        self.calls += 1
        if any(r.row_id == self.bad for r in window.rows):
            raise RuntimeError("CUDA out of memory (injected)")
        return self.inner.prefill(window)


def test_a_failing_window_is_split_down_to_its_bad_row(job):
    readout, backend, config = job
    flaky = FailOnRow(backend, "r4")
    s = run_job(config("o.parquet"), backend=flaky)
    ref = run_job(config("ref.parquet"), backend=backend)
    n = RECORDS[readout]
    assert (s.answered, s.errors) == (8 * n, n) and flaky.calls > 2
    out, good = pq.read_table(s.output).to_pylist(), pq.read_table(ref.output).to_pylist()
    bad = [r for r in out if r["id"] == "r4"]
    where = "questions.u: " if readout == "label-logprobs" else ""
    assert bad[0]["error"] == f"row r4: {where}RuntimeError: CUDA out of memory (injected)"
    rest, want = [r for r in out if r["id"] != "r4"], [r for r in good if r["id"] != "r4"]
    assert [(r["id"], r["error"]) for r in rest] == [(r["id"], r["error"]) for r in want]
    # the same answers; the hf classifier pads a batch, so other batch neighbours move logits by ~1e-7
    assert [r["probs"] for r in rest] == [pytest.approx(r["probs"], abs=1e-5) for r in want]


@pytest.mark.parametrize("readout", READOUTS)
def test_dry_run_plans_without_a_model(readout, tmp_path, tiny_model, tiny_classifier):
    src = write_jsonl(tmp_path / "in.jsonl", rows_for(readout) + ["{broken"])
    out = tmp_path / "o.parquet"
    command = "run" if readout == "label-logprobs" else "classify"
    model = tiny_model if readout == "label-logprobs" else tiny_classifier
    r = cli(command, src, "-o", out, "-m", model, "-b", "hf", "--dry-run", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert f"openjev-batch {command} --dry-run" in r.stdout
    n = RECORDS[readout]
    for key, value in [
        ("rows", 10),
        ("questions", 9 * n + 1),
        ("row/question errors", 1),
        ("branches", 9 * n),
    ]:
        assert any(line.split("│")[1:3] and line.split("│")[1].strip() == key and line.split("│")[2].strip() == str(value) for line in r.stdout.splitlines()), (key, r.stdout)  # fmt: skip
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


@pytest.mark.parametrize("readout", READOUTS)
def test_validate_checks_rows_of_either_readout(readout, tmp_path):
    bad = (
        {"id": "x", "premise": "only a premise"}
        if readout == "classifier-head"
        else {"id": "x", "state": "s"}
    )
    src = write_jsonl(
        tmp_path / "in.jsonl", [*rows_for(readout, 3), bad, {"id": "r0", **rows_for(readout, 1)[0]}]
    )
    r = cli("validate", src, "--readout", readout)
    assert r.returncode == 3, r.stderr
    want = "row x: hypothesis: missing" if readout == "classifier-head" else "row x: questions: missing"
    assert want in r.stderr and "duplicate id 'r0'" in r.stderr
    # counted as `run` counts its output: label-logprobs, 3 good rows' 2 questions, the bad row's one record
    # and the duplicate's 2 questions with its error (validate left out the refused rows' questions)
    noun, got = ("rows", "5 rows, 2 rows") if readout == "classifier-head" else ("questions", "5 rows, 9 questions, 3 questions")
    assert r.stdout.startswith(f"{got} with errors"), r.stdout
    ok = cli("validate", write_jsonl(tmp_path / "ok.jsonl", rows_for(readout, 3)), "--readout", readout)
    assert ok.returncode == 0 and f"0 {noun} with errors" in ok.stdout
