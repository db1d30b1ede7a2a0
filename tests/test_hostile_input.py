"""Hostile bytes and sizes: lone surrogates, deep nesting, integers beyond int64, invalid UTF-8 in Parquet,
a byte-order mark, huge strings. Each is a row error naming row and field (or, in a --questions file, a job
error with exit 4), never a traceback; `validate` reports what `run` rejects."""

from __future__ import annotations

import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import cli, write_jsonl

from openjev_batch.core import RowError
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.readouts.label_logprobs.questions import MAX_QUESTION_BYTES
from openjev_batch.readouts.label_logprobs.rows import Row, parse_row
from openjev_batch.values import MAX_DEPTH, MAX_STATE_BYTES

Q = {"q": {"type": "noul", "instructions": "Is it about money?"}}
QJ = json.dumps(Q)
DEEP = "[" * 100_000 + "]" * 100_000
LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def line(**rec) -> str:
    """One JSONL line; lone surrogates written as JSON escapes (`\\ud800`), as json.dumps does."""
    return json.dumps({"questions": Q, **rec})


def hostile_jsonl(path):
    lines = [
        "\ufeff" + line(id="bom", state="first line after a byte-order mark", channel="web"),
        line(id="ok", state="fine", channel="mail"),
        line(id="s1", state="bad \ud800 text", channel="web"),
        line(id="id\udfff", state="fine", channel="web"),
        line(
            id="q1",
            state="fine",
            questions={"q": {"type": "noul", "instructions": "Is \ud800 it?"}},
            channel="web",
        ),
        line(
            id="q2",
            state="fine",
            questions={"q\ud800": {"type": "noul", "instructions": "Is it?"}},
            channel="x",
        ),
        line(id="k1", state="fine", channel="\udc00"),
        line(id="k2", state="fine", channel=2**70),
        DEEP,
        line(id="d1", state=DEEP, channel="web"),
        line(id="d2", state="fine", channel=json.loads("[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5))),
        line(id="d3", state="fine", questions=DEEP, channel="web"),
        line(id="big", state="x" * (MAX_STATE_BYTES + 1), channel="web"),
        line(
            id="bigq",
            state="fine",
            questions={"q": {"type": "noul", "instructions": "y" * (MAX_QUESTION_BYTES + 1)}},
        ),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


EXPECTED = {  # row id (None: unidentified) → the error's field and cause
    "s1": r"row s1: state: not valid Unicode text \(lone surrogate '\\ud800' at character 4\)",
    "q1": r"row q1: questions\.q: not valid Unicode text",
    "q2": r"row q2: questions: question id 'q\\ud800': not valid Unicode text",
    "k1": r"row k1: channel: not valid Unicode text",
    "k2": r"row k2: channel: integer 1180591620717411303424 is outside int64",
    "d1": r"row d1: state: JSON nested too deeply",
    "d2": rf"row d2: channel: nested deeper than {MAX_DEPTH} levels",
    "d3": r"row d3: questions: JSON nested too deeply",
    "big": rf"row big: state: {MAX_STATE_BYTES + 1:,} bytes of text, limit {MAX_STATE_BYTES:,}",
    "bigq": rf"row bigq: questions\.q: question text is {MAX_QUESTION_BYTES + 1:,} bytes",
}
UNIDENTIFIED = [
    r"row at index 3: id: not valid Unicode text \(lone surrogate '\\udfff' at character 2\)",
    r"row at index 8: line 9: JSON nested too deeply",
]


def test_read_rows_turns_each_into_a_row_error(tmp_path):
    rows = [r for chunk in read_rows(hostile_jsonl(tmp_path / "in.jsonl"), keep=("channel",)) for r in chunk]
    assert isinstance(rows[0], Row) and rows[0].id == "bom" and rows[0].kept == {"channel": "web"}
    assert isinstance(rows[1], Row)
    errors = {
        r.id: (r.error if isinstance(r, RowError) else r.questions[0].error)
        for r in rows[2:]
        if r.id is not None
    }
    for rid, pattern in EXPECTED.items():
        assert re.fullmatch(pattern + ".*", errors[rid]), (rid, errors[rid])
    unidentified = [r.error for r in rows if isinstance(r, RowError) and r.id is None]
    assert len(unidentified) == len(UNIDENTIFIED)
    for e, pattern in zip(unidentified, UNIDENTIFIED, strict=True):
        assert re.fullmatch(pattern + ".*", e), e
    assert rows[6].kept == {"channel": None} and rows[7].kept == {"channel": None}  # written as null


def test_parse_row_values_without_recursion():
    """A 100,000-deep value given as a Python object (not JSON text) is refused by an iterative walk."""
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    r = parse_row(0, {"id": "a", "state": "x", "questions": Q, "c": deep}, keep=("c",))
    assert isinstance(r, RowError) and r.error == f"row a: c: nested deeper than {MAX_DEPTH} levels"
    r = parse_row(
        0, {"id": "a", "state": [{"role": "user", "content": "x" * MAX_STATE_BYTES}] * 2, "questions": Q}
    )
    assert isinstance(r, RowError) and "bytes of message text, limit" in r.error


def test_run_and_validate_report_the_same_rows(tmp_path, tiny_model):
    """The real command on the hostile file: exit 3, every hostile row named with its field, the good rows
    answered, no traceback; `validate --keep` finds exactly the rows `run` rejects."""
    inp = hostile_jsonl(tmp_path / "in.jsonl")
    out = tmp_path / "out.parquet"
    r = cli("run", inp, "-o", out, "-m", tiny_model, "-b", "hf", "--keep", "channel", "--no-progress")
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    t = pq.read_table(out).to_pylist()
    by_id = {x["id"]: x for x in t if x["id"] is not None}
    assert by_id["bom"]["error"] is None and by_id["ok"]["error"] is None and by_id["bom"]["channel"] == "web"
    for rid, pattern in EXPECTED.items():
        assert re.fullmatch(pattern + ".*", by_id[rid]["error"]), (rid, by_id[rid]["error"])
    run_errors = sorted({x["error"] for x in t if x["error"]})
    v = cli("validate", inp, "--keep", "channel", "--show", "100")
    assert v.returncode == 3 and "Traceback" not in v.stderr
    shown = sorted(set(re.findall(r"✗ (.*)", v.stderr)))
    assert shown == run_errors
    # counted as `run` counts them: every record (question) of the output, and those with an error
    assert f"{len(t):,} questions, {sum(1 for x in t if x['error']):,} questions with errors" in v.stdout


def invalid_utf8_parquet(path):
    """Arrow does not check UTF-8 when a binary buffer is viewed as strings, nor when Parquet is read."""
    ids = pa.array([b"a", b"b\xff", b"c", b"d"], pa.binary()).view(pa.string())
    state = pa.array([b"fine", b"fine", b"bad \xc3\x28 bytes", b"fine"], pa.binary()).view(pa.string())
    chan = pa.array([b"web", b"web", b"web", b"\xe2\x82"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ids, "state": state, "questions": [QJ] * 4, "channel": chan}), path)
    return path


def test_invalid_utf8_in_parquet_is_a_row_error(tmp_path):
    rows = [r for c in read_rows(invalid_utf8_parquet(tmp_path / "in.parquet"), keep=("channel",)) for r in c]
    assert isinstance(rows[0], Row)
    assert rows[1].id is None and rows[1].error == "row at index 1: id: not valid UTF-8 (byte 0xff at 1)"
    assert rows[2].error == "row c: state: not valid UTF-8 (byte 0xc3 at 4)"
    assert rows[3].error.startswith("row d: channel: not valid UTF-8") and rows[3].kept == {"channel": None}
    v = cli("validate", tmp_path / "in.parquet", "--keep", "channel")
    assert v.returncode == 3 and "3 questions with errors" in v.stdout and "Traceback" not in v.stderr


@pytest.mark.parametrize(
    "text, message",
    [
        ("a: " + DEEP, "cannot parse: nested too deeply"),
        ('q:\n  type: noul\n  instructions: "bad \\ud800"\n', "questions.q: not valid Unicode text"),
        (
            '"q\\udc00":\n  type: noul\n  instructions: "fine"\n',
            r"question id 'q\udc00': not valid Unicode",
        ),
        # "billion laughs": 9 levels of 9 aliases, 10^9 nodes once expanded (took 2 CPU minutes to refuse)
        (LAUGHS, "cannot parse: its aliases expand it past 200,000 nodes"),
        ("a: &a [1, *a]\n", "cannot parse: an alias refers to the node that contains it"),
    ],
    # short ids: the 200,000-character one went into PYTEST_CURRENT_TEST, and the CLI's subprocess could not
    # start ("Argument list too long": one environment string over 128 KiB)
    ids=lambda v: v[:40] if isinstance(v, str) else None,
)
def test_hostile_questions_file_is_a_job_error(tmp_path, text, message):
    qf = tmp_path / "q.yaml"
    qf.write_text(text, encoding="utf-8")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x"}) + "\n")
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert message in " ".join(r.stderr.split()), r.stderr


def test_questions_file_sharing_criteria_through_aliases_is_read(tmp_path):
    """Anchors and aliases a person writes (one criteria map shared by two questions) stay accepted."""
    qf = tmp_path / "q.yaml"
    qf.write_text("a:\n  type: choice\n  instructions: Kind?\n  criteria: &kinds {x: X, y: Y}\n"
                  "b:\n  type: choice\n  instructions: Kind again?\n  criteria: *kinds\n")  # fmt: skip
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "x"}])
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 0 and "1 row, 2 questions, 0 questions with errors" in r.stdout, r.stdout + r.stderr


def test_questions_file_with_a_byte_order_mark(tmp_path):
    qf = tmp_path / "q.yaml"
    qf.write_bytes(b"\xef\xbb\xbf" + json.dumps(Q).encode())
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "state": "x"}).encode() + b"\n")
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 0 and "1 row, 1 question, 0 questions with errors" in r.stdout, r.stdout + r.stderr


def test_invalid_utf8_in_csv_is_a_row_error(tmp_path):
    p = tmp_path / "in.csv"
    q = json.dumps(Q).replace('"', '""')
    p.write_bytes(f'id,state,questions\na,"ok \xff bad","{q}"\nb,fine,"{q}"\n'.encode("latin-1"))
    rows = [r for c in read_rows(p) for r in c]
    assert rows[0].error == "row a: state: not valid UTF-8 (byte 0xff at 3)" and isinstance(rows[1], Row)


def test_terminal_escapes_in_rows_are_printed_escaped(tmp_path, tiny_model):
    """Hostile trial: a row id with ESC sequences (clear screen, set the title) and BEL reached the operator's
    terminal raw through run's error summary, validate's listing and --show-prompt; and validate read a
    row's `[bold]` as markup. They are shown escaped (\\x1b, \\u202e), the rest of the text unchanged."""
    import json

    evil = "\u001b[2J\u001b]0;TITLE\u0007[bold]X[/bold]\u202eY"
    q = {"q": {"type": "noul", "instructions": "Urgent?"}}
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"id": evil, "state": 5, "questions": q}) + "\n"
        + json.dumps({"id": "ok", "state": f"text {evil}", "questions": q}) + "\n"
        # a question id and an option name: raw in the answers table and validate's summary line
        + json.dumps({"id": "q", "state": "x", "questions": {f"z{evil}": {
            "type": "choice", "instructions": "i", "criteria": {f"a{evil}": None, "b": None}}}}) + "\n"
        + json.dumps({"id": "w", "state": "x", "questions": {f"w{evil}": {
            "type": "choice", "instructions": "i", "criteria": {"a": None}}}}) + "\n"
    )  # fmt: skip
    runs = [
        cli("validate", src),
        cli("run", src, "-m", tiny_model, "-b", "hf", "-o", tmp_path / "o.parquet", "--no-progress"),
        cli("run", src, "-m", tiny_model, "-b", "hf", "--show-prompt", "2"),
    ]
    for r in runs:
        text = r.stdout + r.stderr
        assert "\u001b" not in text and "\u0007" not in text and "\u202e" not in text, text
        assert "Traceback" not in text
    assert (
        "\\x1b[2J\\x1b]0;TITLE\\x07[bold]X[/bold]\\u202eY" in runs[0].stderr
    )  # the id, escaped, markup as text
    assert runs[1].returncode == 3 and "\\x1b[2J" in runs[1].stderr
    assert runs[2].returncode == 0 and "text \\x1b[2J" in runs[2].stdout


# classify: the same value checks as `run` (core.checked_row_id, values.kept_values / text_field), issue 25
CLS_HOSTILE = [  # (record, the row's error: None when the row is unidentified and found by index)
    ({"id": "ok", "text": "fine", "gold": "a"}, None),
    ({"id": "s1", "text": "bad \ud800"}, r"row s1: text: not valid Unicode text \(lone surrogate '\\ud800' at character 4\)"),
    ({"id": "p1", "premise": "x \udc00", "hypothesis": "y"}, r"row p1: premise: not valid Unicode text"),
    ({"id": "h1", "premise": "x", "hypothesis": "\udfff"}, r"row h1: hypothesis: not valid Unicode text"),
    ({"id": "i\ud800", "text": "fine"}, r"row at index 4: id: not valid Unicode text \(lone surrogate"),
    ({"id": "k1", "text": "fine", "gold": "\ud800"}, r"row k1: gold: not valid Unicode text"),
    ({"id": "k2", "text": "fine", "gold": 2**70}, r"row k2: gold: integer 1180591620717411303424 is outside int64"),
    ({"id": "n5", "text": 5}, r"row n5: text: expected text, got a number \(5\)"),
    ({"id": "big", "text": "x" * (MAX_STATE_BYTES + 1)}, rf"row big: text: {MAX_STATE_BYTES + 1:,} bytes of text, limit {MAX_STATE_BYTES:,}"),
    ({"id": "pair", "premise": "p" * 2**20, "hypothesis": "h" * 2**20}, r"row pair: premise \+ hypothesis: 2,097,1\d\d bytes of text, limit"),
]  # fmt: skip


def test_classify_and_validate_report_hostile_values(tmp_path, tiny_classifier):
    """classify ended in a traceback (rc 1: the tokenizer's TypeError on a surrogate, the Parquet write's
    UnicodeEncodeError on an id or kept value) and `validate --readout classifier-head` called the file
    clean; a 3 MB text went to the tokenizer (1.2 GB). Now each is a row error naming row and field, exit 3,
    and validate lists the same errors."""
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(rec) + "\n" for rec, _ in CLS_HOSTILE), encoding="utf-8")
    before = inp.read_bytes()
    out = tmp_path / "out.parquet"
    r = cli("classify", inp, "-o", out, "-m", tiny_classifier, "-b", "hf", "--keep", "gold", "--no-progress")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    rows = pq.read_table(out).to_pylist()
    assert [x["error"] is None for x in rows] == [p is None for _, p in CLS_HOSTILE]
    for x, (_, pattern) in zip(rows, CLS_HOSTILE, strict=True):
        assert pattern is None or re.match(pattern, x["error"]), x["error"]
    assert rows[0]["label"] is not None and rows[0]["gold"] == "a" and rows[5]["gold"] is None
    v = cli("validate", inp, "--readout", "classifier-head", "--keep", "gold")
    assert v.returncode == 3 and "Traceback" not in v.stderr
    assert sorted(re.findall(r"✗ (.*)", v.stderr)) == sorted(x["error"] for x in rows if x["error"])
    assert inp.read_bytes() == before


def test_classify_names_invalid_utf8_not_a_class(tmp_path):
    """`text: expected a string, got InvalidText` named the stand-in class of an undecodable cell."""
    path = tmp_path / "in.parquet"
    text = pa.array([b"fine", b"bad \xc3\x28"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ["a", "b"], "text": text}), path)
    v = cli("validate", path, "--readout", "classifier-head")
    assert v.returncode == 3 and "Traceback" not in v.stderr
    assert "✗ row b: text: not valid UTF-8 (byte 0xc3 at 4)" in v.stderr and "InvalidText" not in v.stderr


# The Python API: a row error cell where the CLI writes one, ConfigError for a bad argument (issue 25)
@pytest.fixture(scope="module")
def clf(tiny_model):
    import openjev_batch as ob

    with ob.Classifier(str(tiny_model), backend="hf", device="cpu") as c:
        yield c


def _errors(table) -> dict:
    return {r["id"]: r["error"] for r in table.to_pylist()}


def test_api_pandas_frame_with_a_surrogate_gives_error_cells(clf):
    """pyarrow's from_pandas raised UnicodeEncodeError (frames.py caught only Arrow's errors); an object
    column holds the lone surrogate as pandas read it from JSON."""
    import pandas as pd

    df = pd.DataFrame(
        {"id": ["a", "b"], "state": ["fine", "bad \ud800"], "gold": ["\udc00", "x"]}, dtype=object
    )
    got = _errors(clf.run(df, Q, keep="gold", output="arrow"))
    assert got["a"] == "row a: gold: not valid Unicode text (lone surrogate '\\udc00' at character 0)"
    assert got["b"].startswith("row b: state: not valid Unicode text (lone surrogate '\\ud800'")


def test_api_pandas_id_or_kept_column_of_hostile_objects_gives_error_cells(clf):
    """Issue 34.17: a lone surrogate in an object `id` column raised UnicodeEncodeError (restoring the
    ids' type); a complex column raised ArrowNotImplementedError, and a kept object column of values neither
    Arrow nor JSON knows raised TypeError. Row errors, or the value's text, instead."""
    import pandas as pd

    df = pd.DataFrame({"id": ["a\ud800", "b"], "state": ["x", "y"]}, dtype=object, index=[7, 8])
    got = clf.run(df, Q)
    assert list(got.index) == [7, 8] and got["id"].isna().tolist() == [True, False]
    assert got["error"][7].startswith("row at index 0: id: not valid Unicode text (lone surrogate '\\ud800'")
    df = pd.DataFrame({"id": ["a", "b"], "state": ["x", "y"], "c": [1 + 2j, 3j], "o": [object(), 1]})
    got = clf.run(df, Q, keep="all", output="arrow").to_pylist()
    assert [r["error"] for r in got] == [None, None] and [r["c"] for r in got] == ["(1+2j)", "3j"]
    assert got[0]["o"].startswith("<object object at") and got[1]["o"] == "1"


def test_api_table_from_an_invalid_utf8_parquet_gives_error_cells(clf, tmp_path):
    """An Arrow Table read from Parquet holds bytes that are not UTF-8: `run` and `show_prompt` raised
    UnicodeDecodeError; the file reader made them row errors already."""
    table = pq.read_table(invalid_utf8_parquet(tmp_path / "in.parquet"))
    got = clf.run(table, keep="channel", output="arrow").to_pylist()
    assert [r["error"] for r in got] == [
        None,
        "row at index 1: id: not valid UTF-8 (byte 0xff at 1)",
        "row c: state: not valid UTF-8 (byte 0xc3 at 4)",
        "row d: channel: not valid UTF-8 (byte 0xe2 at 0)",
    ]
    shown = clf.show_prompt(table, n=3)
    assert "═══ row a" in shown and "not valid UTF-8 (byte 0xff at 1)" in shown


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda ob, m: ob.Classifier(None, "hf"),
            "model must be a hub id, a folder or a packaged name, got None",
        ),
        (
            lambda ob, m: ob.Classifier(m, "hf", system_prompt="\ud800"),
            "not valid Unicode text (lone surrogate '\\ud800' at character 0)",
        ),
        (
            lambda ob, m: ob.run([{"state": "x"}], m.parent, model=m, backend="hf"),
            "cannot read: Is a directory",
        ),
        # issue 42: two options (or two questions) of one name once written as text, and a line break in a
        # question id or option name (it added lines to the reports), are refused
        (
            lambda ob, m: ob.run([{"state": "x"}], {"q": {"type": "choice", "instructions": "Which?",
                                 "criteria": {1: "one", "1": "uno"}}}, model=m, backend="hf"),
            "questions.q.criteria: option name '1' given twice (as 1 and '1')",
        ),
        (
            lambda ob, m: ob.run([{"state": "x"}], {1: {"type": "noul", "instructions": "A?"},
                                 "1": {"type": "noul", "instructions": "B?"}}, model=m, backend="hf"),
            "question id '1' given twice (as 1 and '1')",
        ),
        (
            lambda ob, m: ob.run([{"state": "x"}], {"a\nb": {"type": "noul", "instructions": "A?"}}, model=m,
                                 backend="hf"),
            "question id 'a\\nb': holds a control character ('\\n'); ids and option names are one line of text",
        ),
        (
            lambda ob, m: ob.run([{"state": "x"}], {"q": {"type": "choice", "instructions": "Which?",
                                 "criteria": {"red\nblue": "a", "green": "b"}}}, model=m, backend="hf"),
            "questions.q.criteria: option 'red\\nblue': holds a control character",
        ),
    ],
    ids=["model-None", "system-prompt-surrogate", "questions-folder", "criteria-collision", "qid-collision",
         "qid-newline", "label-newline"],
)  # fmt: skip
def test_api_bad_arguments_are_config_errors(tiny_model, call, message):
    """Classifier(None) and a surrogate system prompt raised TypeError, questions=<a folder>
    IsADirectoryError; each is a ConfigError naming the argument."""
    import openjev_batch as ob
    from openjev_batch.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        call(ob, tiny_model)
    assert message in str(e.value)


# Arguments with a byte that is not UTF-8 (argv decodes with surrogateescape: a Latin-1 `Café`), issue 25
LATIN1 = "Caf\udce9"  # what Python makes of the bytes `Caf\xe9` on the command line


@pytest.mark.parametrize(
    "command, args, message",
    [
        ("run", ["--system-prompt", LATIN1, "-o", "{out}"], "--system-prompt: not valid UTF-8 (byte 0xe9 at character 3)"),
        ("run", ["--system-prompt", LATIN1, "--show-prompt", "1"], "--system-prompt: not valid UTF-8 (byte 0xe9"),
        ("run", ["-o", "{tmp}/" + LATIN1 + ".parquet"], "output: output '{tmp}/Caf\\udce9.parquet': not valid UTF-8 (byte 0xe9"),
        ("classify", ["--template", LATIN1 + " {{premise}} {{hypothesis}}", "-o", "{out}"], "--template: not valid UTF-8 (byte 0xe9 at character 3)"),
        # a JSON key `"Caf\udce9"` matches the argument: the kept column's name failed at the Parquet write
        ("run", ["--keep", LATIN1, "-o", "{out}"], "keep: column name 'Caf\\udce9': not valid UTF-8 (byte 0xe9"),
        ("classify", ["--keep", LATIN1, "-o", "{out}"], "keep: column name 'Caf\\udce9': not valid UTF-8 (byte 0xe9"),
    ],
    ids=["system-prompt", "show-prompt", "output-name", "template", "keep-run", "keep-classify"],
)  # fmt: skip
def test_non_utf8_arguments_are_one_line_job_errors(
    tmp_path, tiny_model, tiny_classifier, command, args, message
):
    """--system-prompt (also with --show-prompt) and --template raised in the tokenizer, an output name in
    pyarrow's file system after the whole job ran: each is refused up front, one line, exit 4."""
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x", "text": "x", "questions": Q, LATIN1: 1}) + "\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    fill = {"out": tmp_path / "o.parquet", "tmp": tmp_path}
    model = tiny_model if command == "run" else tiny_classifier
    r = cli(command, inp, "-m", model, "-b", "hf", "--no-progress", *(a.format(**fill) for a in args))
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: invalid options: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert message.format(**fill) in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no output, lock, partial
    assert (
        inp.read_text()
        == json.dumps({"id": "a", "state": "x", "text": "x", "questions": Q, LATIN1: 1}) + "\n"
    )


def test_validate_refuses_the_keep_names_run_refuses(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x", "questions": Q, LATIN1: 1}) + "\n")
    r = cli("validate", inp, "--keep", LATIN1)
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert (
        r.stderr.startswith("error: ") and "column name 'Caf\\udce9': not valid UTF-8 (byte 0xe9" in r.stderr
    ), r.stderr


# sglang where it cannot run: one line with the hint, exit 4 (issue 25: a 221-line traceback, rc 1)
def _without_sgl_kernel() -> dict:
    """The environment of a machine without sglang's kernels: the tests' sgl_kernel shim off PYTHONPATH."""
    import os
    import subprocess
    import sys

    from conftest import SHIMS

    pp = os.pathsep.join(
        p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SHIMS)
    )
    env = {**os.environ, "PYTHONPATH": pp, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    # the plain install has no sglang: the message is then "needs sglang installed"
    pytest.importorskip("sglang.srt")
    if (
        subprocess.run([sys.executable, "-c", "import sgl_kernel"], env=env, capture_output=True).returncode
        == 0
    ):
        pytest.skip("sgl_kernel is installed here (a GPU machine): sglang can start")
    return env


@pytest.mark.parametrize("command", ["run", "classify"])
def test_sglang_without_its_kernels_is_one_line_with_the_hint(tmp_path, tiny_model, tiny_classifier, command):
    """`run -b sglang` imported sglang's Engine while start_engine's arguments were evaluated, outside the
    `try` that names a missing sgl_kernel; `classify -b sglang` printed the raw ModuleNotFoundError without
    "use --backend hf", under four lines of sglang's import warnings."""
    import subprocess
    import sys

    from conftest import ROOT

    env = _without_sgl_kernel()
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x", "premise": "p", "hypothesis": "h"}) + "\n")
    model, extra = (
        (tiny_model, ["-q", ROOT / "examples" / "ticket_questions.yaml"])
        if command == "run"
        else (tiny_classifier, [])
    )
    out = tmp_path / "o.parquet"
    args = [command, inp, *extra, "-m", model, "-b", "sglang", "-o", out, "--no-progress"]
    r = subprocess.run(
        [sys.executable, "-m", "openjev_batch", *map(str, args)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert (
        r.stderr.startswith("error: sglang's kernels (sgl_kernel) are missing") and "--backend hf" in r.stderr
    )
    assert len(r.stderr.splitlines()) < 5, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # no output, lock or partial left


# What reaches the terminal, and an output that cannot be written (issue 25, smaller items)
def test_validate_prints_a_newline_inside_an_id_escaped(tmp_path):
    """Issue 34.18: `validate` printed an id's newline raw, so one error read as two lines (the second not
    an error's)."""
    p = tmp_path / "in.jsonl"
    p.write_text('{"id": "a\\nb", "state": ""}\n{"id": "c", "state": "ok"}\n')
    (tmp_path / "q.json").write_text(QJ)
    r = cli("validate", p, "-q", tmp_path / "q.json")
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines()[0] == "✗ row a\\nb: state: empty conversation", r.stderr


def test_printable_escapes_invisible_and_line_breaking_characters():
    """U+2028 (a line break to terminals and log viewers) and U+200B (a character no one sees) were printed
    raw; a lone surrogate (a path's non-UTF-8 byte) is escaped too. Ordinary text stays as it is."""
    from openjev_batch.cli import printable

    assert printable("a\u2028b\u2029c\u200bd\ufeffe\u2060f\ud800g\U000e0041") == (
        "a\\u2028b\\u2029c\\u200bd\\ufeffe\\u2060f\\ud800g\\U000e0041"
    )
    assert printable("Café 😀 日本 tab\tnewline\n") == "Café 😀 日本 tab\tnewline\n"


def test_the_summary_prints_the_output_path_as_text(tmp_path, tiny_model):
    """The end-of-run table and the errors line printed the output path raw: rich read its `[red]` as
    markup, a terminal its ESC and U+2028."""
    folder = tmp_path / "[red]x\u2028y"
    folder.mkdir()
    out = folder / "o\u001b[2J.parquet"
    inp = tmp_path / "in.jsonl"
    inp.write_text(line(id="a", state="fine") + "\n" + line(id="b", state="") + "\n")
    r = cli("run", inp, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "\u2028" not in r.stderr and "\u001b" not in r.stderr
    shown = str(out).replace("\u2028", "\\u2028").replace("\u001b", "\\x1b")
    assert r.stderr.count(shown) == 2, r.stderr  # the table's output row and "see the `error` column of"
    assert out.exists()


def _chattr(flag: str, path) -> None:
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        pytest.skip("no chattr here")
    if subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root and a file system with attributes")


def test_an_immutable_output_is_refused_before_the_job(tmp_path, tiny_model):
    """An immutable OUT (`chattr +i`) ran the whole job, then failed at the rename, leaving OUT.lock and a
    `.join-*.tmp` (os.access says yes to root). It is refused up front: exit 4, one line, nothing written."""
    out = tmp_path / "o.parquet"
    out.write_bytes(b"the user's file")
    inp = tmp_path / "in.jsonl"
    inp.write_text(line(id="a", state="fine") + "\n")
    _chattr("+i", out)
    try:
        r = cli("run", inp, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress")
    finally:
        _chattr("-i", out)
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(
        f"error: invalid options: output: {out} cannot be replaced (Operation not permitted)"
    )
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "o.parquet"]
    assert out.read_bytes() == b"the user's file"


@pytest.mark.parametrize("where", ["input", "-q", "-o", "-o folder"])
def test_a_symlink_loop_is_a_one_line_job_error(tmp_path, where):
    """Issue 34.17: a symbolic link loop as the input, -q or -o (or a folder on -o's way) ended in
    `RuntimeError: Symlink loop` from a path's resolve(), a traceback."""
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    inp = write_jsonl(tmp_path / "in.jsonl", [line(id="a", state="fine")])
    q = tmp_path / "q.json"
    q.write_text(QJ)
    args = {"input": [loop, "-q", q, "-o", tmp_path / "o.jsonl"], "-q": [inp, "-q", loop, "-o", tmp_path / "o.jsonl"],
            "-o": [inp, "-q", q, "-o", loop], "-o folder": [inp, "-q", q, "-o", loop / "o.jsonl"]}[where]  # fmt: skip
    commands = [("run", *args, "-m", "M", "-b", "hf")]
    if not where.startswith("-o"):  # validate has no -o
        commands.append(("validate", *args[:3]))
    for command in commands:
        r = cli(*command)
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        assert "a symbolic link loop" in r.stderr and len(r.stderr.splitlines()) <= 2, r.stderr


def test_too_little_memory_is_one_line_saying_so(tmp_path, tiny_model):
    """Issue 34.17: under `prlimit --as=1G` a MemoryError traceback (or an ImportError "failed to map
    segment"), an empty "cannot load model … with transformers: " or, at 2G, "not a valid safetensors file"
    blaming the checkpoint. Each limit now either runs or ends in one line naming memory (exit 4), or, where a
    native library aborts (Rust's allocator in tokenizers; OpenBLAS at import, now given one thread under a
    limit), in that library's own one line naming the failed allocation."""
    import os
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    inp = write_jsonl(tmp_path / "in.jsonl", [line(id="a", state="fine")])
    refused = 0
    # RUST_BACKTRACE unset, as for most users: where it is set, tokenizers >= 0.23 follows its allocation line
    # with the backtrace the user asked for
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"} | {"HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    for mib in (300, 600, 1024, 1536):
        def limit(n=mib << 20):
            resource.setrlimit(resource.RLIMIT_AS, (n, n))

        r = subprocess.run(
            [sys.executable, "-m", "openjev_batch", "run", inp, "-m", tiny_model, "-b", "hf", "--no-progress",
             "-o", tmp_path / f"o{mib}.jsonl"],
            capture_output=True, text=True, cwd=ROOT, env=env, preexec_fn=limit, timeout=600,
        )  # fmt: skip
        assert "Traceback" not in r.stderr and "╭" not in r.stderr, (mib, r.stderr)
        if r.returncode not in (0, 4):
            # a native allocator gave up inside a library (the tokenizers' Rust code: "memory allocation of N bytes
            # failed", abort, -6; glibc starting a thread: "cannot allocate memory for thread-local data: ABORT",
            # seen with the plain install's newer torch), which no Python handler can catch: its own line naming the
            # allocation is what is left to the user, followed since tokenizers 0.23 (a newer Rust) by Rust's one
            # note on how to get a backtrace
            lines = r.stderr.strip().splitlines()
            rust_note = "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace"
            first = lines[0].lower()
            assert "memory" in first and "alloc" in first and lines[1:] in ([], [rust_note]), (mib, r.stderr)
            continue
        if r.returncode == 4:
            refused += 1
            assert "out of memory" in r.stderr and "not a valid safetensors" not in r.stderr, (mib, r.stderr)
            assert len(r.stderr.strip().splitlines()) <= 3, (mib, r.stderr)
    assert refused  # 300 MiB cannot even import torch


def test_a_join_that_cannot_be_renamed_leaves_no_temporary_file(tmp_path):
    """The final rename failing (here: a folder took the output's name after the job began) left the
    half-joined `.join-*.tmp` in the partial; the parts stay for --resume."""
    from openjev_batch.pipeline.output.store import OutputStore
    from openjev_batch.readouts.label_logprobs import OUTPUT_SCHEMA

    out = tmp_path / "o.parquet"
    s = OutputStore(out)
    s.begin_chunk(0, 1, 1, "h0")
    s.write(0, [{**dict.fromkeys(OUTPUT_SCHEMA.names), "id": "a", "error": "x"}])
    (out / "taken").mkdir(parents=True)
    with pytest.raises(OSError):
        s.close()
    s.abandon()
    assert sorted(p.name for p in (tmp_path / "o.parquet.partial").iterdir()) == [
        "chunks.jsonl",
        "manifest.json",
        "part-000000.parquet",
    ]


def test_run_refuses_a_sequence_classifier_naming_classify(tiny_classifier, tmp_path):
    """Hostile trial: `run` on a *ForSequenceClassification checkpoint answered from a randomly initialised
    lm_head (different numbers each time, rc 0); it is refused before loading, naming `classify`."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hello", "questions": Q}])
    out = tmp_path / "o.parquet"
    r = cli("run", src, "-m", tiny_classifier, "-b", "hf", "-o", out, "--no-progress")
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert "sequence classifier" in r.stderr and "openjev-batch classify" in r.stderr
    assert not out.exists()


def test_an_input_inside_the_outputs_partial_is_refused_and_kept(tiny_model, tmp_path):
    """Hostile trial: an input inside OUT.partial/ was deleted with the stale partial a fresh run clears."""
    partial = tmp_path / "o.parquet.partial"
    partial.mkdir()
    src = write_jsonl(partial / "in.jsonl", [{"id": "a", "state": "hello"}])
    before = src.read_bytes()
    r = cli("run", src, "-m", tiny_model, "-b", "hf", "-o", tmp_path / "o.parquet", "--no-progress")
    assert r.returncode == 4 and "inside o.parquet.partial" in r.stderr and "Traceback" not in r.stderr
    assert src.read_bytes() == before


def test_eval_with_undecodable_benchmark_text_is_a_row_error_not_a_traceback(tiny_model, tmp_path):
    """Hostile trial: a lone surrogate in a benchmark question ended eval in a UnicodeEncodeError traceback
    and left questions.jsonl.tmp; the row is an error of its own and the rest is scored."""
    bench = tmp_path / "b.jsonl"
    bench.write_text(
        '{"question":"q\\ud800","subject":"s","choices":["a","b"],"answer":0}\n'
        '{"question":"fine","subject":"s","choices":["a","b"],"answer":1}\n'
    )
    out = tmp_path / "ev"
    r = cli("eval", bench, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress")
    assert "Traceback" not in r.stderr and r.returncode in (0, 3), r.stderr[-2000:]
    assert not list(out.glob("*.tmp")) and (out / "report.json").exists()


# -- issue 42's attack trial ------------------------------------------------------------------------------


def _image_rows(folder):
    from tiny import make_pictures

    make_pictures(folder)
    q = json.dumps({"red": {"type": "noul", "instructions": "Is it red?"}})
    rows = [{"id": f"r{i}", "state": "A photo.", "image": "red.png", "questions": q} for i in range(2)]
    return write_jsonl(folder / "rows.jsonl", rows)


def _repaint(path) -> None:
    from PIL import Image

    Image.new("RGB", (96, 64), (20, 20, 220)).save(path)


def test_resume_keys_cover_the_image_files_the_rows_name(tiny_vl, tmp_path):
    """Attack trial (issue 42): `--resume` after an image file changed mixed old and new answers (exit 0),
    and on a finished output said "nothing to do": the resume key hashed the input file only. Now each chunk's
    key also covers the images its rows name, so both a partial and a finished output are refused, saying
    that an image changed."""
    from openjev_batch import readouts
    from openjev_batch.config import RunConfig
    from openjev_batch.pipeline.input.source import FileSource
    from openjev_batch.pipeline.output.ledger import Ledger

    inp = _image_rows(tmp_path)
    cfg = RunConfig(input=inp, model=str(tiny_vl), backend="hf", chunk_rows=1)
    readout = readouts.build(cfg.readout, cfg)
    before = [key for _, key in FileSource(cfg).chunks(readout)]
    ledger = Ledger(tmp_path)
    for i, key in enumerate(before):
        ledger.begin(i, 1, 1, key)
    _repaint(tmp_path / "red.png")
    after = [key for _, key in FileSource(cfg).chunks(readout)]
    assert [a.split("+")[0] for a in after] == [b.split("+")[0] for b in before] and after != before
    with pytest.raises(Exception, match=r"--resume: an image file the rows name changed since .* \(its content differs at input chunk 0"):
        Ledger.read(tmp_path).begin(0, 1, 1, after[0])

    # the finished output: refused, not "nothing to do"
    (tmp_path / "chunks.jsonl").unlink()
    make = ("run", inp, "-m", tiny_vl, "-b", "hf", "--device", "cpu", "--no-progress", "-o", tmp_path / "o.jsonl")
    r = cli(*make)
    assert r.returncode == 0, r.stderr[-2000:]
    side = json.loads((tmp_path / "o.jsonl.manifest.json").read_text())
    assert len(side["input_sha256"]) == 64 and len(side["images_sha256"]) == 64
    r = cli(*make, "--resume")
    assert r.returncode == 0 and "nothing to do" in r.stdout + r.stderr, r.stderr[-2000:]
    from tiny import make_pictures

    make_pictures(tmp_path)  # red.png red again (the run read it blue)
    r = cli(*make, "--resume")
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "an image file the rows name changed" in r.stderr and "rerun without --resume" in r.stderr


def _one_line_error(r, msg: str) -> None:
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr[-2000:]
    text = " ".join(r.stderr.split())
    assert text.startswith("error:") and r.stderr.count("error:") == 1 and msg in text, r.stderr[-2000:]


def test_a_named_pipe_is_never_waited_on(tmp_path):
    """Attack trial (issue 42): a named pipe as `-q`, `--config`, `--system-prompt @…` or eval's benchmark hung,
    waiting for a writer that had gone (the earlier fix covered the input only). A pipe with no writer is now a
    one-line job error at once (the timeout is the test's bound on a hang); eval and calibrate, which read their
    file whole and more than once, refuse a pipe."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    qf = tmp_path / "q.json"
    qf.write_text(QJ)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    nowriter = "cannot read: a named pipe with nothing written to it"
    _one_line_error(cli("validate", src, "-q", fifo, timeout=60), f"--questions {fifo}: {nowriter}")
    run = ("run", src, "-m", "M", "-b", "hf", "-o", tmp_path / "o.jsonl")
    _one_line_error(cli(*run, "--config", fifo, timeout=60), f"--config {fifo}: {nowriter}")
    r = cli(*run, "-q", qf, "--system-prompt", f"@{fifo}", timeout=60)
    _one_line_error(r, f"--system-prompt @{fifo}: {nowriter}")
    _one_line_error(cli("validate", fifo, "-q", qf, timeout=60), f"{fifo}: the pipe is empty")
    special = f"{fifo}: a named pipe, not a regular file; write it to a file first"
    _one_line_error(cli("eval", fifo, "-m", "M", "-b", "hf", "-o", tmp_path / "ev", timeout=60), special)
    _one_line_error(cli("calibrate", fifo, "--gold", "g", "-o", tmp_path / "c.json", timeout=60), special)


def test_an_option_file_on_a_named_pipe_is_read_once(tmp_path):
    """`-q <(…)`: the command reads the questions file twice (its questions, then its sha256 for --resume);
    the second open hung on the pipe whose writer had written and gone. The pipe is read once."""
    import subprocess

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    (tmp_path / "q.json").write_text(QJ)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat '{tmp_path / 'q.json'}' > '{fifo}'"])
    try:
        r = cli("validate", src, "-q", fifo, timeout=60)
    finally:
        writer.kill()
        writer.wait()
    assert r.returncode == 0 and "1 row, 1 question, 0 questions with errors" in r.stderr + r.stdout, r.stderr[-2000:]


def test_a_device_input_is_refused_before_it_is_copied(tmp_path):
    """Attack trial (issue 42): naming `/dev/zero` as the input wrote 29 GB to TMPDIR before the disk check
    refused it; a device input, named or on standard input, is refused before a byte is copied."""
    import subprocess
    import sys

    from conftest import ROOT

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    _one_line_error(cli("validate", "/dev/zero", "-q", "q.json", timeout=60), "/dev/zero: a device, not a file")
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run(
            [sys.executable, "-m", "openjev_batch", "validate", "-", "-q", "q.json"],
            stdin=zero, capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={**os.environ, "TMPDIR": str(tmp)},
        )  # fmt: skip
    _one_line_error(r, "standard input: a device, not a file or a pipe")
    assert not list(tmp.iterdir())


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_sigterm_during_the_stdin_copy_removes_the_copy(tmp_path, signame, code):
    """Attack trial (issue 42): SIGTERM while `validate -` copied standard input left the copy in TMPDIR
    (0.4 GB on tmpfs, once 10.4 GB on disk): validate had no handler, so the default action skipped the
    cleanup. It now stops as `run` does: the copy removed, exit 143; a closed terminal's SIGHUP too (129)."""
    import signal
    import subprocess
    import sys
    import time

    from conftest import ROOT

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    feed = subprocess.Popen(["yes", '{"id": "a", "state": "x"}'], stdout=subprocess.PIPE)
    p = subprocess.Popen(
        [sys.executable, "-m", "openjev_batch", "validate", "-", "-q", "q.json"],
        stdin=feed.stdout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        # a terminal's command: SIGHUP at its default even when pytest runs under nohup (its SIG_IGN is inherited,
        # and the product rightly keeps a nohup's ignore: this test then hung)
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )  # fmt: skip
    feed.stdout.close()
    try:
        deadline = time.time() + 120
        while time.time() < deadline and sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()) < 1 << 20:
            time.sleep(0.2)
        assert list(tmp.iterdir()), "the copy never began"
        p.send_signal(getattr(signal, signame))
        _, stderr = p.communicate(timeout=60)
    finally:
        p.kill()
        feed.kill()
        feed.wait()
    assert p.returncode == code and f"terminated ({signame})" in stderr and "Traceback" not in stderr, stderr
    assert not list(tmp.iterdir())


def test_unreadable_leading_rows_are_row_errors(tmp_path, tiny_model):
    """Attack trial (issue 42): when the first 1,000 rows were unreadable the job was refused with a false "no
    row has a `state` field … rename", and the good rows after them went unanswered; small all-bad files
    (UTF-16, a repeated key, a ragged CSV line) got it too. Each unreadable row is now its row's error."""
    src = tmp_path / "lead.jsonl"
    src.write_text("{bad\n" * 1200 + json.dumps({"id": "g", "state": "good"}) + "\n")
    qf = tmp_path / "q.json"
    qf.write_text(QJ)
    out = tmp_path / "o.jsonl"
    r = cli("run", src, "-q", qf, "-m", tiny_model, "-b", "hf", "--no-progress", "-o", out)
    assert r.returncode == 3 and "Traceback" not in r.stderr and "rename" not in r.stderr, r.stderr[-2000:]
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(recs) == 1201 and [x["error"] for x in recs if x["id"] == "g"] == [None]
    assert recs[0]["error"].startswith("row at index 0: line 1: malformed JSON")

    small = {
        "u16.jsonl": (
            '{"id": "a", "state": "hi"}\n{"id": "b", "state": "yo"}\n'.encode("utf-16"),
            "line 1: NUL bytes, so not UTF-8 text (UTF-16? save the file as UTF-8)",
        ),
        "dup.jsonl": (b'{"id": "a", "state": "hi", "state": "x"}\n', "line 1: duplicate key 'state'"),
        "rag.csv": (b"id,state\na,hi,extra\n", "line 2: 3 fields, the header has 2"),
    }
    for name, (data, error) in small.items():
        (tmp_path / name).write_bytes(data)
        r = cli("validate", tmp_path / name, "-q", qf)
        assert "Traceback" not in r.stderr and "no row has" not in r.stderr, (name, r.stderr)
        assert r.returncode == 3 and error in r.stderr, (name, r.stderr)


def test_no_row_with_a_question_is_refused_before_the_model_loads(tmp_path, tiny_model):
    """Issue 42: every row's `questions` being `{}` loaded the model and exited 3 with every row an error,
    while a missing field exited 4 before the load. Now both are the job's error before the model loads."""
    src = write_jsonl(
        tmp_path / "in.jsonl",
        [{"id": "a", "state": "hi", "questions": {}}, {"id": "b", "state": "yo", "questions": "{}"}],
    )
    out = tmp_path / "o.jsonl"
    msg = "no questions: every row's `questions` is empty; give them in each row or in one file with -q"
    _one_line_error(cli("run", src, "-m", tiny_model, "-b", "hf", "--no-progress", "-o", out), msg)
    _one_line_error(cli("validate", src), msg)
    assert not out.exists()
    # one row with a question is enough: the others are row errors, as before
    write_jsonl(src, [{"id": "a", "state": "hi", "questions": {}}, {"id": "b", "state": "yo", "questions": Q}])
    assert cli("validate", src).returncode == 3


def test_out_of_memory_at_import_is_one_line(tmp_path):
    """Attack trial (issue 42): `python -m openjev_batch` under a low address-space limit (`ulimit -v 300000`
    and below) ended in a traceback from an import (a shared library "failed to map segment", a MemoryError)
    before the command's own out-of-memory handler: now one line, exit 4. (OpenBLAS, loaded with numpy, may
    abort from C with its own one line first: no Python handler runs then; pyarrow's jemalloc may warn in one
    line of its own before the product's.)"""
    import resource
    import subprocess
    import sys

    from conftest import ROOT

    from openjev_batch.errors import OUT_OF_MEMORY

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    qf = tmp_path / "q.json"
    qf.write_text(QJ)
    said = set()
    for kib in (60_000, 100_000, 150_000, 300_000):

        def limit(kib=kib):
            resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))

        r = subprocess.run(
            [sys.executable, "-m", "openjev_batch", "validate", src, "-q", qf],
            capture_output=True, text=True, cwd=ROOT, preexec_fn=limit, timeout=300,
        )  # fmt: skip
        lines = r.stderr.strip().splitlines()
        assert "Traceback" not in r.stderr and len(lines) <= 2, (kib, r.stderr[-3000:])
        # a native library may say one line of its own first, from C, where no Python handler runs: OpenBLAS
        # aborting at import, or pyarrow's jemalloc failing to start its background thread (a warning; the
        # import goes on and fails later, in Python, where the handler speaks)
        native = ("OpenBLAS error", "<jemalloc>:")
        if r.returncode == 4:
            said.add(kib)
            assert lines[-1] == f"error: {OUT_OF_MEMORY}", (kib, r.stderr)
            assert all(x.startswith(native) for x in lines[:-1]), (kib, r.stderr)
        else:
            assert r.returncode == 0 or lines[0].startswith(native), (kib, r.stderr)
    assert 60_000 in said  # a library cannot even be mapped there: the import's own failure, said in one line


def test_path_failures_are_user_messages_not_python_internals(tmp_path, tiny_model):
    """Attack trial (issue 42): messages quoted Python: a 300-character name was a traceback ending in
    `OSError: [Errno 36] File name too long`, eval's missing benchmark `[Errno 2] No such file or directory`,
    a `--calibration` symlink loop `RuntimeError: Symlink loop`. Each is one line in words."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    qf = tmp_path / "q.json"
    qf.write_text(QJ)
    long = tmp_path / ("a" * 300 + ".jsonl")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    run = ("run", src, "-q", qf, "-m", tiny_model, "-b", "hf", "--no-progress")
    cases = [
        (cli(*run[:-1], "-o", long), "characters): file name too long"),
        (cli("validate", long, "-q", qf), "characters): file name too long"),
        (cli("eval", long, "-m", tiny_model, "-o", tmp_path / "ev"), "characters): file name too long"),
        (cli("eval", tmp_path / "nope.jsonl", "-m", tiny_model, "-o", tmp_path / "ev"),
         f"eval: {tmp_path / 'nope.jsonl'}: no such file or directory"),
        (cli(*run, "-o", tmp_path / "o.jsonl", "--calibration", tmp_path / "loop1"),
         "loop1: a symbolic link loop (a link that leads back to itself)"),
    ]  # fmt: skip
    for r, msg in cases:
        assert r.returncode == 4 and "Traceback" not in r.stderr and "Errno" not in r.stderr, r.stderr[-2000:]
        assert len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr[-2000:]


def test_an_output_on_a_named_pipe_or_in_dev_is_refused(tmp_path):
    """Attack trial (issue 48.5): `-o` naming a FIFO silently replaced the pipe with a regular file (the output
    is joined, then renamed into place), and `-o /dev/stdout.parquet` created a file in /dev. Both are one-line
    job errors before any model loads; the pipe stays a pipe, /dev gets nothing. Calibrate's `-o` too."""
    import stat

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    pipe = f"{fifo} is a named pipe, not a file: the output is written whole and renamed into place"
    _one_line_error(cli("run", src, "-q", "x.json", "-m", "M", "-b", "hf", "-o", fifo, timeout=60), pipe)
    assert "-o - writes JSONL to standard output" in " ".join(cli("run", src, "-m", "M", "-o", fifo).stderr.split())
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    cfifo = tmp_path / "cal.json"
    os.mkfifo(cfifo)
    _one_line_error(cli("calibrate", src, "--gold", "g", "-o", cfifo, timeout=60), f"{cfifo} is a named pipe")
    assert stat.S_ISFIFO(os.stat(cfifo).st_mode)
    dev = "/dev/openjev-test-48.parquet"
    r = cli("run", src, "-q", "x.json", "-m", "M", "-b", "hf", "-o", dev, timeout=60)
    _one_line_error(r, f"{dev}: /dev is a system folder (devices, kernel files), not a place for files")
    assert not os.path.exists(dev)


def test_a_cut_config_json_is_one_line_from_run_and_the_api(tiny_model, tmp_path):
    """The hostile trial: a model folder whose config.json was cut short ended `run` (and `serve`, and the
    Python API) in a 176-line JSONDecodeError traceback with exit 1."""
    import shutil

    from conftest import EXAMPLES

    import openjev_batch as ob
    from openjev_batch.errors import BackendError

    broken = tmp_path / "model"
    shutil.copytree(tiny_model, broken)
    (broken / "config.json").write_text('{"model_type": "qwen3",\n')
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "hi"}])
    out = tmp_path / "o.parquet"
    r = cli("run", inp, "-q", EXAMPLES / "ticket_questions.yaml", "-m", broken, "-b", "hf", "-o", out, "--no-progress")
    assert r.returncode == 4, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: cannot load model: {broken / 'config.json'} is not valid JSON "
        "(Expecting property name enclosed in double quotes: line 2 column 1 (char 24))"
    )
    assert "Traceback" not in r.stderr and not out.exists()
    with pytest.raises(BackendError, match="config.json is not valid JSON"):
        ob.Classifier(str(broken), backend="hf")
