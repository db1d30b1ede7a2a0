"""The one job loop's contract (pipeline/loop.py), with the hf backend over the tiny model: resume skips the
chunks already done, the count check fails a job whose runner drops a record (for a file and for the Python
API's in-memory sink), and one failure tracker spans the job's chunks."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import write_jsonl

from openjev_batch.config import build_config
from openjev_batch.errors import BackendError, OutputCheckError
from openjev_batch.pipeline import loop
from openjev_batch.pipeline.input.frames import kind_of
from openjev_batch.pipeline.input.source import FileSource, FrameSource
from openjev_batch.pipeline.output.sink import MemorySink, StoreSink
from openjev_batch.pipeline.runners.local import LocalRunner

Q = {"u": {"type": "noul", "instructions": "Urgent?"}}


def rows(n: int, state=lambda i: f"ticket number {i} about billing") -> list[dict]:
    return [{"id": f"r{i}", "state": state(i), "questions": Q} for i in range(n)]


class Recording(LocalRunner):
    """The real local runner, recording the chunks the loop gives it and the tracker it is scored with;
    `drop`: a chunk whose last record it drops (a runner bug the count check must catch); `stop_after`:
    raise KeyboardInterrupt once that chunk is written (a job stopped midway)."""

    def __init__(self, backend, drop: int | None = None, stop_after: int | None = None):
        super().__init__(backend)
        self.drop, self.stop_after, self.chunks, self.trackers = drop, stop_after, [], set()

    def score(self, todo, tracker, progress=None, on_progress=None):
        self.trackers.add(id(tracker))
        for i, records, info in super().score(todo, tracker, progress, on_progress):
            self.chunks.append(i)
            yield i, records[:-1] if i == self.drop else records, info
            if i == self.stop_after:
                raise KeyboardInterrupt


def file_job(tmp_path, runner, name="o.parquet", **kw):
    kw = {"chunk_rows": 2, **kw}
    cfg = build_config(
        input=tmp_path / "in.jsonl", output=tmp_path / name, model="-", backend="hf", progress=False, **kw
    )
    source = FileSource(cfg)
    return loop.run(cfg, source, StoreSink(cfg, source), runner)


def test_resume_skips_the_chunks_already_done(hf_backend, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", rows(7))  # four chunks, the last one short
    ref, _ = file_job(tmp_path, LocalRunner(hf_backend), "ref.parquet")
    first = Recording(hf_backend, stop_after=1)
    with pytest.raises(KeyboardInterrupt):
        file_job(tmp_path, first)
    assert first.chunks == [0, 1]
    again = Recording(hf_backend)
    s, out = file_job(tmp_path, again, resume=True)
    assert again.chunks == [2, 3]  # chunks 0 and 1 are the earlier run's parts, not run again
    assert s.resumed_chunks == (0, 1) and (s.rows, s.questions) == (ref.rows, ref.questions) == (7, 7)
    assert pl.read_parquet(out).equals(pl.read_parquet(tmp_path / "ref.parquet"))


def test_count_check_fails_a_job_whose_runner_drops_a_record(hf_backend, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", rows(5))
    with pytest.raises(OutputCheckError, match="count check failed: 5 input rows need 5 output rows.*has 4"):
        file_job(tmp_path, Recording(hf_backend, drop=1))
    assert not (tmp_path / "o.parquet").exists()  # no output file from a job that lost a record
    # the Python API's sink: the same check (the API had none)
    cfg = build_config(input="<data>", model="-", backend="hf", chunk_rows=2, progress=False)
    data = pl.DataFrame(rows(5))
    with pytest.raises(OutputCheckError, match="count check failed"):
        loop.run(cfg, FrameSource(data, kind_of(data), 2), MemorySink(), Recording(hf_backend, drop=2))


class AlwaysFails:
    """The real backend, failing every window the same way (a broken backend, not bad rows)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, k):
        return getattr(self.inner, k)

    def prefill(self, window):
        raise RuntimeError("kernel missing (injected)")


def test_one_failure_tracker_spans_the_job(hf_backend, tmp_path):
    """Chunks of one row each: a tracker per chunk would see one failure at a time and write every row as an
    error; the job's one tracker sees three rows in a row fail alike and ends the job (exit 4)."""
    write_jsonl(tmp_path / "in.jsonl", rows(5, state=lambda i: f"conversation {i}"))
    runner = Recording(AlwaysFails(hf_backend))
    with pytest.raises(BackendError, match="failed the same way on 3 rows in a row"):
        file_job(tmp_path, runner, chunk_rows=1)
    assert len(runner.trackers) == 1 and runner.chunks == [0, 1]  # ended in the third chunk
