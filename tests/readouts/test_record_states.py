"""Issue 32.4: a `state` that is a JSON object (or a list that is not a message list) is rendered as text:
keys in the order given, nested values as compact JSON; shown by --show-prompt; 1,000-deep nesting is a row
error that loses no other row."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import cli, write_jsonl

from openjev_batch.core import RowError
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.readouts.label_logprobs.rows import Row, parse_state

Q = {"u": {"type": "noul", "instructions": "Is it urgent?"}}


def test_object_and_list_states_render_in_the_given_order():
    msgs, plain = parse_state(
        {"ticket": "App crashes", "plan": "pro", "seats": 3, "vip": True, "note": None, "tags": ["a", "b"],
         "meta": {"z": 1, "a": {"x": "é"}}}
    )  # fmt: skip
    assert plain and msgs[0].role == "user"
    assert msgs[0].content == (
        'ticket: App crashes\nplan: pro\nseats: 3\nvip: true\nnote: null\ntags: ["a","b"]\nmeta: {"z":1,"a":{"x":"é"}}'
    )
    # another key order is another text: the order given is kept, not sorted
    assert (
        parse_state({"plan": "pro", "ticket": "App crashes"})[0][0].content
        == "plan: pro\nticket: App crashes"
    )
    assert parse_state(["first", 2, {"k": "v"}])[0][0].content == '- first\n- 2\n- {"k":"v"}'
    # a message list is still a conversation, and a malformed message is still named as one
    assert not parse_state([{"role": "user", "content": "hi"}])[1]


def test_jsonl_and_parquet_struct_states_and_deep_nesting(tmp_path):
    deep = '{"a": ' * 1000 + '"x"' + "}" * 1000  # built as text: json.dumps itself recurses too deep
    src = tmp_path / "in.jsonl"
    write_jsonl(
        src, [{"id": "o", "state": {"ticket": "refund", "plan": "pro"}}, {"id": "l", "state": ["x", 1]}]
    )
    with src.open("a") as f:
        f.write('{"id": "deep", "state": ' + deep + "}\n")
        f.write('{"id": "d100", "state": ' + '{"a": ' * 100 + "1" + "}" * 100 + "}\n")
        f.write(json.dumps({"id": "after", "state": "still here"}) + "\n")
    from openjev_batch.readouts.label_logprobs.questions import parse_questions

    rows = [r for c in read_rows(src, parse_questions(Q)) for r in c]
    # the 1,000-deep line cannot be parsed (no id to name): an error at its position, naming its line
    assert [r.id for r in rows] == ["o", "l", None, "d100", "after"]
    assert isinstance(rows[0], Row) and rows[0].messages[0].content == "ticket: refund\nplan: pro"
    assert isinstance(rows[2], RowError) and "line 3: JSON nested too deeply" in rows[2].error
    assert isinstance(rows[3], RowError) and rows[3].error == "row d100: state: nested deeper than 64 levels"
    assert isinstance(rows[4], Row)
    t = pa.Table.from_pylist([{"id": "s", "state": {"ticket": "refund", "plan": "pro"}, "questions": Q}])
    assert pa.types.is_struct(t.schema.field("state").type)
    pq.write_table(t, tmp_path / "s.parquet")
    (row,) = [r for c in read_rows(tmp_path / "s.parquet") for r in c]
    assert isinstance(row, Row) and row.messages[0].content == "ticket: refund\nplan: pro"


def test_show_prompt_shows_the_rendered_object_as_text(tmp_path):
    src = write_jsonl(
        tmp_path / "in.jsonl", [{"id": "o", "state": {"ticket": "<|im_end|>refund", "plan": "pro"}}]
    )
    qf = tmp_path / "q.json"
    qf.write_text(json.dumps(Q))
    r = cli("run", src, "-q", qf, "-m", "qwen3-tokenizer", "--show-prompt", "1")
    assert r.returncode == 0, r.stderr
    assert "Text:\nticket: <|im_end|>refund\nplan: pro" in r.stdout, r.stdout


def test_values_with_no_deterministic_text_are_refused_and_dates_are_written_as_dates():
    """A hostile trial: the API took `{"o": object()}` and rendered `<object object at 0x…>`, another prompt on
    every run; bytes became a Python repr and a tuple key passed. A Parquet date or decimal is its text."""
    import datetime
    import decimal

    import pytest

    for bad in ({"o": object()}, {"o": b"\x00\xff"}, {(1, 2): "v"}, {1: "v"}, {"o": {(1, 2): "v"}}):
        with pytest.raises(ValueError, match="not JSON text|not text|keys must be"):
            parse_state(bad)
    msgs, _ = parse_state({"day": datetime.date(2026, 12, 3), "amount": decimal.Decimal("9.50")})
    assert msgs[0].content == 'day: "2026-12-03"\namount: "9.50"'  # as before: JSON strings


def test_only_a_conversation_shaped_state_is_a_conversation():
    """Issue 42: an object with a `messages` field was refused as a bad conversation although the README reads
    any other object as a record, and a list of records with a `content` field was read as a broken
    conversation. A conversation is now what is shaped like one: a non-empty list whose every item has a
    `role`, or an object whose `messages` is such a list."""
    msgs, plain = parse_state({"subject": "Login", "messages": ["first mail", "second mail"]})
    assert plain and msgs[0].content == 'subject: Login\nmessages: ["first mail","second mail"]'
    msgs, plain = parse_state([{"content": "item one", "rating": 5}])
    assert plain and msgs[0].content == '- {"content":"item one","rating":5}'
    # a string holding such JSON is not a conversation either: it stays the string as written
    text = '[{"content": "item one", "rating": 5}]'
    assert parse_state(text) == (parse_state(text)[0], True) and parse_state(text)[0][0].content == text
    # what is shaped like a conversation still is one, and its faults are still named as a conversation's
    assert not parse_state({"messages": [{"role": "user", "content": "hi"}]})[1]
    for bad, msg in [
        ([{"role": "user"}], "messages[0]: needs 'role' and 'content'"),
        ({"messages": []}, "empty conversation"),
        ({"messages": [{"role": "user", "content": "hi"}], "x": 1}, "has only that key"),
    ]:
        with pytest.raises(ValueError, match=re.escape(msg)):
            parse_state(bad)


def test_a_parquet_struct_state_renders_only_the_keys_the_row_has(tmp_path):
    """Issue 42: a Parquet struct state rendered a row's missing keys as `key: null` lines (a struct type holds
    every row's fields), so the same record got another prompt than from JSONL. Struct rows give only the
    fields they hold, in the struct's field order (README), nested structs too."""
    recs = [
        {"id": "a", "state": {"ticket": "refund", "plan": "pro", "meta": {"x": 1, "y": 2}}},
        {"id": "b", "state": {"ticket": "login", "meta": {"x": 3}}},
        {"id": "c", "state": {"messages": [{"role": "user", "content": "hi"}]}},
    ]
    src = write_jsonl(tmp_path / "in.jsonl", recs)
    t = pa.Table.from_pylist(recs)
    assert pa.types.is_struct(t.schema.field("state").type)
    pq.write_table(t, tmp_path / "in.parquet")
    from openjev_batch.readouts.label_logprobs.questions import parse_questions

    def texts(path):
        return {r.id: [(m.role, m.content) for m in r.messages] for c in read_rows(path, parse_questions(Q)) for r in c}

    jsonl, parquet = texts(src), texts(tmp_path / "in.parquet")
    assert jsonl["b"] == [("user", 'ticket: login\nmeta: {"x":3}')]
    assert jsonl["c"] == [("user", "hi")]
    assert parquet == jsonl
