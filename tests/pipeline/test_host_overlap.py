"""The job loop renders + tokenizes chunk k+1 while chunk k is on the engine, and the output is unchanged."""

import threading

import polars as pl
import pytest
from conftest import write_jsonl

import openjev_batch.pipeline.input.read as read
import openjev_batch.pipeline.input.source as source
import openjev_batch.pipeline.job as pipeline
from openjev_batch.config import build_config
from openjev_batch.readouts import label_logprobs
from openjev_batch.readouts.label_logprobs.prompt import Prompter
from openjev_batch.readouts.label_logprobs.rows import Row

CHUNK = 2
N_ROWS = 9  # five chunks, the last one short


def rows():
    qs = {
        "u": {"type": "noul", "instructions": "Urgent?"},
        "c": {"type": "choice", "instructions": "Topic?", "criteria": {"billing": None, "login": None}},
    }
    out = [
        {"id": f"r{i}", "state": f"ticket number {i} about billing", "questions": qs} for i in range(N_ROWS)
    ]
    out[4] = "{not json"  # a row error in the middle chunk keeps its place
    return out


def test_host_stage_of_the_next_chunk_runs_while_the_engine_works(hf_backend, tmp_path, monkeypatch):
    started: dict[int, threading.Event] = {k: threading.Event() for k in range(N_ROWS // CHUNK + 1)}
    host_threads: dict[int, str] = {}

    class Recording(Prompter):  # the real Prompter; it notes which chunk it renders, in which thread
        def build_many(self, rs: list[Row]):
            if rs:
                k = rs[0].pos // CHUNK
                host_threads[k] = threading.current_thread().name
                started[k].set()
            return super().build_many(rs)

    class WaitsForNextChunk:  # the real hf backend; a window of chunk k waits until chunk k+1 is rendering
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, k):
            return getattr(self.inner, k)

        def prefill(self, window):
            k = window.rows[0].pos // CHUNK
            if (k + 1) * CHUNK < N_ROWS:
                assert started[k + 1].wait(30), f"chunk {k + 1} was not being prepared while chunk {k} ran"
            return self.inner.prefill(window)

    inp = write_jsonl(tmp_path / "in.jsonl", rows())
    ref = build_config(input=inp, output=tmp_path / "ref.parquet", model="-", backend="hf", progress=False)
    s_ref = pipeline.run_job(ref, backend=hf_backend)  # one chunk: nothing to overlap

    monkeypatch.setattr(label_logprobs, "Prompter", Recording)  # the readout builds run's prompter
    cfg = build_config(
        input=inp, output=tmp_path / "o.parquet", model="-", backend="hf", chunk_rows=CHUNK, progress=False
    )
    s = pipeline.run_job(cfg, backend=WaitsForNextChunk(hf_backend))
    assert all(name.startswith("openjev-host") for name in host_threads.values()), host_threads
    assert len(host_threads) == N_ROWS // CHUNK + 1
    a, b = pl.read_parquet(tmp_path / "ref.parquet"), pl.read_parquet(tmp_path / "o.parquet")
    assert a.select("id", "question_id", "answer", "error").equals(
        b.select("id", "question_id", "answer", "error")
    )
    assert a["id"].to_list()[:4] == ["r0", "r0", "r1", "r1"] and a["error"].null_count() == a.height - 1
    for p, q in zip(a["probs"].to_list(), b["probs"].to_list(), strict=True):
        assert (p is None and q is None) or max(abs(x - y) for x, y in zip(p, q, strict=True)) <= 1e-6
    assert (s.rows, s.questions, s.answered, s.errors) == (
        s_ref.rows,
        s_ref.questions,
        s_ref.answered,
        s_ref.errors,
    )


def test_an_input_error_in_a_later_chunk_still_ends_the_job(hf_backend, tmp_path, monkeypatch):
    """The reader runs in the host thread; an error it raises after the first chunk still reaches the caller,
    with the finished chunk kept for --resume."""
    inp = write_jsonl(tmp_path / "in.jsonl", rows())
    cfg = build_config(
        input=inp, output=tmp_path / "o.parquet", model="-", backend="hf", chunk_rows=CHUNK, progress=False
    )
    real = read.job_rows

    def fails_after_one_chunk(*a, **kw):  # injected fault: the disk goes away after chunk 0
        it, digest = real(*a, **kw)

        def chunks():
            yield next(it)
            raise OSError("disk gone")

        return chunks(), digest

    monkeypatch.setattr(source, "job_rows", fails_after_one_chunk)  # what FileSource reads through
    with pytest.raises(OSError, match="disk gone"):
        pipeline.run_job(cfg, backend=hf_backend)
    assert [p.name for p in (tmp_path / "o.parquet.partial").glob("part-*")] == ["part-000000.parquet"]


def test_an_engine_that_dies_while_the_next_chunk_is_read_fails_the_job_once(
    hf_backend, tmp_path, monkeypatch
):
    """The CI failure on fa92eeb: the engine died while the host thread was still reading the next chunk,
    and the loop's close of that reader raised "generator already executing" instead of the engine's
    error. The runner now waits for its host step, so the job ends with the BackendError and the partial."""
    from openjev_batch.errors import BackendError
    from openjev_batch.pipeline.output.store import OutputStore

    reading = threading.Event()
    begin = OutputStore.begin_chunk

    def slow_begin(self, i, *a, **kw):  # chunk 1 is still being read when chunk 0's engine call fails
        if i == 1:
            reading.set()
            threading.Event().wait(0.5)
        return begin(self, i, *a, **kw)

    class Dies:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, k):
            return getattr(self.inner, k)

        def prefill(self, window):
            assert reading.wait(30)
            raise BackendError("sglang engine failed: scheduler died (injected)")

        def check_alive(self):
            raise BackendError("scheduler died (injected)")

    monkeypatch.setattr(OutputStore, "begin_chunk", slow_begin)
    inp = write_jsonl(tmp_path / "in.jsonl", rows())
    cfg = build_config(
        input=inp, output=tmp_path / "o.parquet", model="-", backend="hf", chunk_rows=CHUNK, progress=False
    )
    with pytest.raises(BackendError, match="scheduler died"):
        pipeline.run_job(cfg, backend=Dies(hf_backend))
    assert not (tmp_path / "o.parquet").exists()
