"""The parse-only runner (pipeline/runners/parse_only.py, `validate`) in the one loop: each row's problems in
input order, every row's questions (as `run` counts them), no tokenizer or model (the model is "": loading
anything would fail), and the null sink's one-chunk part."""

from __future__ import annotations

from conftest import write_jsonl

from openjev_batch import readouts
from openjev_batch.config import build_config
from openjev_batch.pipeline import loop
from openjev_batch.pipeline.input.source import FileSource
from openjev_batch.pipeline.output.sink import NullSink
from openjev_batch.pipeline.runners import stand_ins
from openjev_batch.pipeline.runners.parse_only import ParseOnlyRunner

Q = {"u": {"type": "noul", "instructions": "Urgent?"}, "v": {"type": "noul", "instructions": "Polite?"}}


def test_checks_every_row_without_a_tokenizer(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [
        {"id": "a", "state": "s", "questions": Q},
        "{broken",
        {"id": "b", "state": "s", "questions": {**Q, "w": {"type": "rank", "instructions": "?"}}},
        {"id": "a", "state": "again", "questions": Q},
        {"id": "c", "state": "s", "questions": Q},
    ])  # fmt: skip
    cfg = build_config(input=src, model="", backend="hf", chunk_rows=2)
    s, result = loop.run(cfg, FileSource(cfg), NullSink(), ParseOnlyRunner())
    c = s.counted
    # every row's questions, a row refused whole too (the broken line's one record, the duplicate's two), as
    # `run`'s output has them (validate said 7 where run said 10)
    assert s.rows == 5 and c.questions == 2 + 1 + 3 + 2 + 2
    assert len(c.errors) == 3 and c.covers == [1, 1, 2] and c.questions_with_errors == 4
    assert c.errors[0].startswith("row at index 1: ")  # input order: the unreadable line first
    assert c.errors[1].startswith("row b: questions.w.type: unknown question type 'rank'")
    assert "duplicate id 'a'" in c.errors[2]
    # the loop's records: every row's (the duplicate's two with its error, the broken line's one)
    assert (s.questions, s.errors) == (c.questions, c.questions_with_errors)
    assert result is None and sorted(x.name for x in tmp_path.iterdir()) == ["in.jsonl"]


def test_the_null_sink_holds_the_last_part_only(tmp_path):
    cfg = build_config(input=tmp_path / "x.jsonl", model="", backend="hf")
    readout = readouts.build(cfg.readout, cfg)
    a, b = (
        readout.parse_row(pos, {"id": k, "state": "s", "questions": Q}) for pos, k in ((0, "a"), (2, "b"))
    )
    sink = NullSink().open({}, readout)
    sink.write(0, stand_ins(readout, [a, readout.unreadable(1, "not JSON")], {0: ["row a: bad"]}))
    part = sink.done(0)
    assert part.schema == readout.schema and part.num_rows == 3  # a's two questions, the line's one record
    assert part.column("id").to_pylist() == ["a", "a", None]
    assert (
        part.column("error").to_pylist()[:2] == ["row a: bad", None] and part.column("answer").null_count == 3
    )
    sink.write(1, stand_ins(readout, [b], {}))
    assert sink.done(0) is None and sink.done(1).num_rows == 2 and sink.rows_written == 5
    assert sink.close() is None and sink.partial is None
