import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_jsonl

from openjev_batch.core import RowError
from openjev_batch.errors import InputFileError
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.readouts.label_logprobs.questions import QuestionError, parse_question
from openjev_batch.readouts.label_logprobs.rows import Row, parse_row, parse_state

Q = {"u": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"]}}


def test_state_forms():
    assert parse_state("hello")[1] is True
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert parse_state(msgs) == parse_state({"messages": msgs}) == parse_state(json.dumps({"messages": msgs}))
    assert parse_state(json.dumps(msgs))[0][1].role == "assistant"


@pytest.mark.parametrize(
    "state,match",
    [
        ("", "empty conversation"),
        ([], "empty conversation"),
        ([{"role": "robot", "content": "x"}], r"messages\[0\].role: unknown role 'robot'"),
        ([{"role": "user"}], r"messages\[0\]: needs 'role' and 'content'"),
        ('{"messages": [', "malformed JSON"),
        (42, r"got a number \(42\)"),
    ],
)
def test_bad_state(state, match):
    with pytest.raises(ValueError, match=match):
        parse_state(state)


def test_question_errors_name_the_field():
    e = parse_question("urgency", {"type": "score", "instructions": "x", "criteria": ["only"]})
    assert isinstance(e, QuestionError)
    assert e.error == "questions.urgency.criteria: score needs 2–64 levels, got 1"
    e = parse_question("k", {"type": "rank", "instructions": "x"})
    assert "questions.k.type: unknown question type 'rank'" in e.error
    e = parse_question("k", {"type": "noul", "instructions": "x", "colour": 1})
    assert "questions.k.colour" in e.error
    e = parse_question(
        "k", {"type": "choice", "instructions": "x", "criteria": {str(i): None for i in range(65)}}
    )
    assert "choice needs 2–64 options, got 65" in e.error
    # issue 34.18: a noul description that is not text was taken as the option's text (choice's were checked)
    e = parse_question("r", {"type": "noul", "instructions": "x", "criteria": {"true": 5}})
    assert isinstance(e, QuestionError) and e.error == (
        "questions.r.criteria.true: description must be a string, a JSON object or array, or null"
    )


def test_question_normal_forms():
    n = parse_question("r", {"type": "noul", "instructions": "Refund?", "criteria": {"true": "wants money"}})
    assert n.options == ("true", "false") and n.descriptions == ("wants money", "No")
    c = parse_question("c", {"type": "choice", "instructions": "x", "criteria": [("a", None), ("b", "bee")]})
    assert c.options == ("a", "b") and c.descriptions == (None, "bee")  # an Arrow map column
    s = parse_question(
        "s", json.dumps({"type": "score", "instructions": "x", "criteria": ["lo", "mid", "hi"]})
    )
    assert s.options == ("0", "1", "2")


def test_row_level_errors_keep_row_id_and_questions():
    r = parse_row(
        3,
        {
            "id": "T7",
            "state": "hi",
            "questions": {**Q, "bad": {"type": "score", "instructions": "x", "criteria": ["a"]}},
        },
    )
    assert isinstance(r, Row)
    assert r.questions[1].error == "row T7: questions.bad.criteria: score needs 2–64 levels, got 1"
    e = parse_row(4, {"state": [], "questions": Q})
    assert (
        isinstance(e, RowError)
        and e.id == "4"
        and e.error == "row 4: state: empty conversation"
        and e.qids == ("u",)
    )
    too_many = {f"q{i}": Q["u"] for i in range(65)}
    assert "65 questions; at most 64" in parse_row(0, {"state": "x", "questions": too_many}).error


def test_jsonl_broken_lines_and_duplicates(tmp_path):
    p = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "a", "state": "x", "questions": Q},
            "{broken",
            {"id": "a", "state": "y", "questions": Q},
            "[1, 2]",
            {"id": "b", "state": "z", "questions": Q},
        ],
    )
    with open(p, "ab") as f:
        f.write(b'{"id": "c", "state": "\xff\xfe", "questions": {}}\n')
    rows = [r for chunk in read_rows(p, chunk_rows=2) for r in chunk]
    assert [type(r).__name__ for r in rows] == ["Row", "RowError", "RowError", "RowError", "Row", "RowError"]
    assert "line 2: malformed JSON" in rows[1].error and rows[1].id is None  # never an index id
    assert rows[2].error.startswith(
        "row a: id: duplicate id 'a', first used by the row at index 0 (this row's index: 2"
    )
    assert "line 4" in rows[3].error and "line 6: not valid UTF-8" in rows[5].error


def test_parquet_nested_and_json_string_columns(tmp_path):
    msgs = [{"role": "user", "content": "hi"}]
    t = pa.table(
        {
            "id": ["n", "j"],
            "state": pa.array([json.dumps(msgs), "plain text"]),
            "questions": pa.array(
                [[("u", json.dumps(Q["u"]))], [("u", json.dumps(Q["u"]))]],
                type=pa.map_(pa.string(), pa.string()),
            ),
        }
    )
    pq.write_table(t, tmp_path / "a.parquet")
    nested = pa.Table.from_pylist([{"id": "s", "state": msgs, "questions": Q}])
    pq.write_table(nested, tmp_path / "b.parquet")
    rows = [r for p in ("a", "b") for c in read_rows(tmp_path / f"{p}.parquet") for r in c]
    assert all(isinstance(r, Row) for r in rows), rows
    assert (
        rows[1].plain and rows[2].messages[0].content == "hi" and rows[2].questions[0].options == ("0", "1")
    )


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("in.txt", "a,b", "unknown extension"),
        ("in.parquet.gz", "x", "unknown extension"),
        ("arr.json", '{"id": 1}', "expected a JSON array of row objects"),
        ("bad.json", "[{", "cannot read as JSON"),
        ("header.csv", "id,state\n", "no rows"),
        ("none.jsonl", None, "no such file"),
        ("missing", None, "missing: no such file or folder$"),  # issue 34.9: said "unknown extension '(none)'"
        ("e.jsonl", "", "empty"),
        ("bad.parquet", "not parquet", "cannot read as Parquet"),
        ("blank.jsonl", "\n\n", "no rows"),
    ],
)
def test_whole_file_errors(tmp_path, name, content, match):
    p = tmp_path / name
    if content is not None:
        p.write_text(content)
    with pytest.raises(InputFileError, match=match):
        [r for c in read_rows(p) for r in c]


def test_error_rows_keep_known_question_types_and_drop_unknown_ones():
    qs = {"a": {"type": "noul", "instructions": "?"}, "b": {"type": "weird", "instructions": "?"}}
    bad_state = parse_row(0, {"id": "x", "state": 5, "questions": qs})
    assert isinstance(bad_state, RowError) and bad_state.qids == ("a", "b")
    assert [bad_state.type_of(i) for i in range(3)] == ["noul", None, None]  # 'weird' is not a type
    ok = parse_row(1, {"id": "y", "state": "hi", "questions": qs})
    assert ok.questions[1].type is None and "unknown question type 'weird'" in ok.questions[1].error


def test_malformed_line_with_shared_questions_keeps_their_types(tmp_path):
    from openjev_batch.readouts.label_logprobs.questions import load_questions

    qf = tmp_path / "q.json"
    qf.write_text(json.dumps({"ok": {"type": "noul", "instructions": "?"}, "u": Q["u"]}))
    p = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "x"}, "{broken"])
    rows = [r for chunk in read_rows(p, load_questions(qf)) for r in chunk]
    assert isinstance(rows[1], RowError) and rows[1].qids == ("ok", "u")
    assert [rows[1].type_of(i) for i in range(2)] == ["noul", "score"]


@pytest.mark.parametrize(
    "text", ["{customer name} wrote: help", "[URGENT] site down", "[1, 2, 3] are my orders", '{"a": 1}']
)
def test_text_that_only_begins_with_a_bracket_is_plain_text(text):
    msgs, plain = parse_state(text)
    assert plain and msgs[0].role == "user" and msgs[0].content == text


def test_json_conversation_strings_are_parsed_with_any_spacing():
    for s in (
        '  { "messages" : [{"role": "user", "content": "hi"}]}',
        '[ {"content": "hi", "role": "user"}]',
    ):
        msgs, plain = parse_state(s)
        assert not plain and msgs[0].content == "hi"


@pytest.mark.parametrize(
    "raw,want",
    [(None, "3"), ("T-1", "T-1"), (7, "7"), (1.0, "1"), (True, None), (1.5, None), ([1], None), ("  ", None)],
)
def test_row_ids_are_strings_ints_or_the_index(raw, want):
    row = parse_row(3, {"id": raw, "state": "hi", "questions": Q})
    if want is None:
        assert isinstance(row, RowError) and row.id is None and row.error.startswith("row at index 3: id: ")
    else:
        assert isinstance(row, Row) and row.id == want


def test_empty_question_id_is_a_row_error():
    row = parse_row(0, {"id": "a", "state": "hi", "questions": {"": Q["u"]}})
    assert isinstance(row, RowError) and row.error == "row a: questions: a question id is empty"


def test_two_rows_without_a_usable_id_are_not_duplicates(tmp_path):
    p = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": True, "state": "a", "questions": Q},
            "{bad",
            "{bad",
            {"id": [1], "state": "b", "questions": Q},
        ],
    )
    rows = [r for chunk in read_rows(p) for r in chunk]
    assert [r.id for r in rows] == [None] * 4
    assert not any("duplicate" in r.error for r in rows)


def test_bad_id_row_with_shared_questions_keeps_one_output_row_per_question(tmp_path):
    from openjev_batch.readouts.label_logprobs.questions import load_questions

    qf = tmp_path / "q.json"
    qf.write_text(json.dumps({"ok": {"type": "noul", "instructions": "?"}, "u": Q["u"]}))
    row = parse_row(0, {"id": [1], "state": "hi"}, load_questions(qf))
    assert isinstance(row, RowError) and row.id is None and row.qids == ("ok", "u")
    assert [row.type_of(i) for i in range(2)] == ["noul", "score"]


def test_threads_default_to_the_idle_cores(monkeypatch):
    """--threads' default: cores minus the 1-minute load, at least 1; left alone when OMP_NUM_THREADS is set
    (the quick start took 753 s with torch's all-cores default at load 6–13 on 2 cores, 43 s with 1)."""
    import os

    from openjev_batch.threads import default_threads, idle_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    for load, want in ((0.0, 4), (1.4, 3), (2.6, 1), (9.0, 1)):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert idle_cores() == want
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_threads() is None


def test_threads_and_system_prompt_limits(tmp_path):
    """Hostile trial: --threads 100000 crashed OpenBLAS (rc 139), API threads=-1 / "2" raised torch's
    RuntimeError and left OMP_NUM_THREADS=-1; a 1 MB --system-prompt failed every row slowly."""
    import os

    from openjev_batch.config import build_config
    from openjev_batch.errors import ConfigError
    from openjev_batch.threads import MAX_THREADS, apply_threads

    before = os.environ.get("OMP_NUM_THREADS")
    for bad in (-1, 0, "2", 2.5, True, MAX_THREADS + 1):
        with pytest.raises(ConfigError, match="threads must be an integer from 1 to 1024"):
            apply_threads(bad)
    assert os.environ.get("OMP_NUM_THREADS") == before  # nothing half-applied
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}\n')
    with pytest.raises(ConfigError, match=r"--system-prompt is 262,145 bytes, limit 262,144"):
        build_config(input=inp, output=tmp_path / "o.parquet", model="-", backend="hf",
                     system_prompt="x" * (256 * 1024 + 1))  # fmt: skip
