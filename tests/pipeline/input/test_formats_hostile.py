"""Hostile input files for the readers (issue 25): what used to answer silently wrong, read without bound,
or end in a traceback now gives a row error naming its line, or one job error (exit 4), on the real CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import polars as pl
import pyarrow as pa
import pytest
from conftest import ROOT, cli

from openjev_batch.core import RowError
from openjev_batch.errors import InputFileError, InputWarning
from openjev_batch.pipeline.input.formats import kept_types
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.readouts.label_logprobs.questions import shared_questions
from openjev_batch.readouts.label_logprobs.rows import Row
from openjev_batch.values import MAX_LINE_BYTES

Q = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
QS = shared_questions(Q, "test")


@pytest.fixture
def qfile(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(Q))
    return p


def _rows(path, **kw) -> list[Row | RowError]:
    return [r for c in read_rows(path, **kw) for r in c]


def test_an_unclosed_csv_quote_is_a_job_error_naming_its_line(tmp_path, qfile):
    """It swallowed every later row: 4 rows in, 2 out, rc 0, and `validate` said "2 rows, 0 errors"."""
    src = tmp_path / "u.csv"
    src.write_text('id,state\na,hello\nb,"unclosed quote here\nc,third row\nd,fourth row\n')
    before = src.read_bytes()
    out = tmp_path / "o.parquet"
    for args in (["validate", src, "-q", qfile], ["run", src, "-q", qfile, "-m", "M", "-b", "hf", "-o", out]):
        r = cli(*args)
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        first = " ".join(r.stderr.split())
        assert first.startswith("error:") and r.stderr.count("error:") == 1, r.stderr
        assert "line 3: a quoted field opens here and is never closed" in first, r.stderr
    assert not out.exists() and src.read_bytes() == before


def test_a_quoted_csv_field_may_span_lines_and_a_swallowing_one_is_warned(tmp_path, qfile):
    """CSV allows a line end in quotes; a field spanning lines that holds a row's worth of commas, or whose
    closing quote is followed by text, is read as written and warned about, naming its lines."""
    ok = tmp_path / "ok.csv"
    # issue 48.8: a line of a row's commas inside a valid quoted field ("lines, too") was warned about
    ok.write_bytes(b'id,state\r\na,"two\r\nlines, too"\r\nb,"say ""hi"""\r\nc,plain\r\n')
    rows = _rows(ok, questions=QS)
    assert [(r.id, r.messages[0].content) for r in rows] == [
        ("a", "two\r\nlines, too"),
        ("b", 'say "hi"'),
        ("c", "plain"),
    ]
    r = cli("validate", ok, "-q", qfile)
    assert r.returncode == 0 and "3 rows, 3 questions, 0 questions with errors" in r.stdout and not r.stderr, r.stderr

    bad = tmp_path / "bad.csv"
    bad.write_text('id,state\na,hello\nb,"open\nc,third row\nd,"fourth" row\ne,fifth\n')
    with pytest.warns(InputWarning, match=r"bad.csv: lines 3–5: a quoted field spans lines and line 4"):
        rows = _rows(bad, questions=QS)
    assert [r.id for r in rows] == ["a", "b", "e"]
    r = cli("validate", bad, "-q", qfile)
    assert r.returncode == 0 and "3 rows" in r.stdout, r.stdout + r.stderr
    assert " ".join(r.stderr.split()).startswith("warning: "), r.stderr
    assert "lines 3–5: a quoted field spans lines" in " ".join(r.stderr.split()), r.stderr

    # a closing quote followed by text gives it away even without a row's commas (one-column file)
    one = tmp_path / "one.csv"
    one.write_text('state\n"open\nsecond\n"third" row\n')
    with pytest.warns(InputWarning, match=r"lines 2–4: .*closing quote on line 4 is followed by text"):
        assert len(_rows(one, questions=QS)) == 1


def test_a_csv_row_with_the_wrong_cell_count_is_that_rows_error(tmp_path):
    src = tmp_path / "n.csv"
    src.write_text("id,state\na,hello\nb,x,y\nc\n\nd,fine\n")
    rows = _rows(src, questions=QS)
    assert [r.id for r in rows] == ["a", None, None, "d"]
    assert (
        rows[1].error == "row at index 1: line 3: 3 fields, the header has 2 (a comma in an unquoted cell?)"
    )
    assert rows[2].error.startswith("row at index 2: line 4: 1 field, the header has 2")


def test_a_long_csv_cell_is_that_rows_error(tmp_path, qfile):
    """A cell over pyarrow's ~2–3 MB block made the whole file unreadable (rc 4), and a 50 MB one aborted
    the process (rc 134): now a cell over the state limit is that row's error, and a record over
    MAX_LINE_BYTES is skipped unread, both naming the row; the other rows are answered."""
    src = tmp_path / "long.csv"
    src.write_text("id,state\na,hello\nb," + "x" * 3_000_000 + "\nc,third\n")
    rows = _rows(src, questions=QS)
    assert [r.id for r in rows] == ["a", "b", "c"] and isinstance(rows[2], Row)
    assert rows[1].error == "row b: state: 3,000,000 bytes of text, limit 2,097,152"
    r = cli("validate", src, "-q", qfile)
    assert r.returncode == 3 and "3 rows, 3 questions, 1 question with errors" in r.stdout, r.stdout + r.stderr

    huge = tmp_path / "huge.csv"  # over the record limit, quoted and spanning lines: skipped, then resynced
    huge.write_text(
        'id,state\na,hello\nb,"' + ("y" * 999 + "\n") * (MAX_LINE_BYTES // 1000 + 1) + '"\nc,third\n'
    )
    rows = _rows(huge, questions=QS)
    assert [r.id for r in rows] == ["a", None, "c"]
    assert rows[1].error.startswith("row at index 1: lines 3–")
    assert rows[1].error.endswith(f"over {MAX_LINE_BYTES:,} bytes in one row (the limit), not read")


def test_a_long_csv_cell_through_run(tiny_model, tmp_path):
    """`run` on a CSV with a cell spanning lines (answered; its second line holds a row's commas, but the
    record has the header's fields: valid CSV, no warning, issue 48.8) and a 3 MB cell (that row's error): the
    other rows are answered."""
    src = tmp_path / "in.csv"
    q = json.dumps(Q).replace('"', '""')
    src.write_text(
        f'id,state,questions\na,"first line\nsecond, line, too","{q}"\nb,{"x" * 3_000_000},"{q}"\nc,third,"{q}"\n'
    )
    out = tmp_path / "o.parquet"
    r = cli("run", src, "-m", tiny_model, "-b", "hf", "--no-progress", "-o", out)
    assert r.returncode == 3, r.stderr
    got = pl.read_parquet(out)
    assert got["id"].to_list() == ["a", "b", "c"]
    assert got["error"].to_list() == [None, "row b: state: 3,000,000 bytes of text, limit 2,097,152", None]
    assert got["probs"][0] is not None and got["probs"][2] is not None
    assert "warning:" not in r.stderr and "quote left open" not in r.stderr, r.stderr


def test_a_question_id_twice_in_a_json_cell_is_that_rows_error(tmp_path):
    """CSV and Parquet cells kept the last of two same-id questions silently (JSONL refused the line)."""
    twice = (
        '{"refund": {"type": "noul", "instructions": "A?"}, "refund": {"type": "noul", "instructions": "B?"}}'
    )
    option_twice = {
        "kind": {"type": "choice", "instructions": "K?", "criteria": '{"a": "x", "a": "y", "b": null}'}
    }
    recs = [
        {"id": "r1", "state": "hi", "questions": twice},
        {"id": "r2", "state": "hi", "questions": json.dumps(option_twice)},
        {
            "id": "r3",
            "state": '[{"role": "user", "content": "a", "content": "b"}]',
            "questions": json.dumps(Q),
        },
        {"id": "r4", "state": "fine", "questions": json.dumps(Q)},
    ]
    csv_in = tmp_path / "in.csv"
    pl.DataFrame(recs).write_csv(csv_in)
    pq_in = tmp_path / "in.parquet"
    pl.DataFrame(recs).write_parquet(pq_in)
    for src in (csv_in, pq_in):
        rows = _rows(src)
        assert rows[0].error == "row r1: questions: duplicate key 'refund' in a JSON object", src
        assert (
            rows[1].questions[0].error
            == "row r2: questions.kind.criteria: duplicate key 'a' in a JSON object"
        )
        assert rows[2].error == "row r3: state: duplicate key 'content' in a JSON object"
        assert isinstance(rows[3], Row)
        r = cli("validate", src)
        assert r.returncode == 3 and "4 rows, 4 questions, 3 questions with errors" in r.stdout, r.stdout + r.stderr
        assert "row r1: questions: duplicate key 'refund'" in r.stderr


def _arrow_folder(folder, tables: list[pa.Table], names: list[str] | None = None):
    """A `datasets` save_to_disk folder by hand: Arrow IPC stream files and a state.json naming them."""
    folder.mkdir(parents=True, exist_ok=True)
    names = names or [f"data-{i:05d}-of-{len(tables):05d}.arrow" for i in range(len(tables))]
    for name, t in zip(names, tables, strict=False):
        with pa.OSFile(str(folder / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    return folder


def _one_error(r, msg: str) -> None:
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    text = " ".join(r.stderr.split())
    assert text.startswith("error:") and r.stderr.count("error:") == 1 and msg in text, r.stderr


def test_hostile_datasets_folders_are_one_line_job_errors(tmp_path, qfile):
    rows = {"id": ["a"], "state": ["hi"], "questions": [json.dumps(Q)]}
    # a --keep column int64 in one file and text in the next: ArrowInvalid at the write
    ds = _arrow_folder(
        tmp_path / "ds", [pa.table({**rows, "k": [1]}), pa.table({**rows, "id": ["b"], "k": ["x"]})]
    )
    out = tmp_path / "o.parquet"
    _one_error(
        cli("run", ds, "-m", "M", "-b", "hf", "-o", out, "--keep", "k"),
        "--keep column 'k' has different types in the folder's Arrow files (int64, string)",
    )
    assert not out.exists()
    # types that do unify are unified (a shard whose values are all null is null-typed)
    ok = _arrow_folder(
        tmp_path / "ok",
        [pa.table({**rows, "k": pa.nulls(1), "n": [1]}), pa.table({**rows, "k": ["x"], "n": [1.5]})],
    )
    assert kept_types(ok, ("k", "n")) == {"k": pa.string(), "n": pa.float64()}

    # a DatasetDict folder whose dataset_dict.json is not JSON, or a list: JSONDecodeError, AttributeError
    for i, text in enumerate(["{not json", '["train"]']):
        dd = tmp_path / f"dd{i}"
        dd.mkdir()
        (dd / "dataset_dict.json").write_text(text)
        msg = (
            "not valid JSON"
            if i == 0
            else "a datasets DatasetDict folder, but its dataset_dict.json lists no splits"
        )
        _one_error(cli("validate", dd, "-q", qfile), msg)

    # data files named outside the folder are refused, not read
    other = _arrow_folder(tmp_path / "other", [pa.table(rows)], ["data.arrow"])
    for name in ["../other/data.arrow", str(other / "data.arrow")]:
        evil = tmp_path / "evil"
        evil.mkdir(exist_ok=True)
        (evil / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
        _one_error(cli("validate", evil, "-q", qfile), f"data file {name!r} is outside the folder")
    for state in ["[1, 2]", '{"_data_files": [{"filename": 5}]}', "{bad"]:
        (evil / "state.json").write_text(state)
        r = cli("validate", evil, "-q", qfile)
        _one_error(r, "state.json")


def test_option_files_are_read_no_further_than_their_limit(tmp_path):
    """`-q /dev/zero` and `--system-prompt @/dev/zero` were read to the end before any size check (a
    MemoryError under a memory limit); now at most the limit is read. The timeout is the test's bound."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "state": "hi"}\n')
    _one_error(
        cli("validate", src, "-q", "/dev/zero", timeout=120), "--questions /dev/zero: over 33,554,432 bytes"
    )
    r = cli("run", src, "-q", "/dev/zero", "-m", "M", "-b", "hf", "-o", tmp_path / "o.parquet", timeout=120)
    _one_error(r, "--questions /dev/zero: over")
    qf = tmp_path / "q.json"
    qf.write_text(json.dumps(Q))
    r = cli("run", src, "-q", qf, "--system-prompt", "@/dev/zero", "-m", "M", "-b", "hf", "-o", tmp_path / "o.parquet", timeout=120)  # fmt: skip
    _one_error(r, "--system-prompt @/dev/zero: over 262,144 bytes, its limit")
    _one_error(cli("validate", src, "-q", tmp_path), "cannot read: Is a directory")  # IsADirectoryError
    assert not (tmp_path / "o.parquet").exists()


def test_a_long_jsonl_line_is_that_rows_error_read_in_bounded_pieces(tmp_path):
    """One 300 MB line in a small .jsonl.gz peaked at 2.1 GB RSS: the state limit was checked after the line
    was read and decoded whole. Now a line over MAX_LINE_BYTES is that row's error, skipped unread: the
    Python heap peak stays near the limit (the old reader held the line, its text and its parse)."""
    import tracemalloc

    from openjev_batch.pipeline.input.formats import count_rows

    src = tmp_path / "long.jsonl.gz"
    lines = [{"id": "a", "state": "hi"}, {"id": "b", "state": "x" * 60_000_000}, {"id": "c", "state": "ok"}]
    src.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in lines), 1))
    del lines
    tracemalloc.start()
    try:
        rows = _rows(src, questions=QS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r.id for r in rows] == ["a", None, "c"] and isinstance(rows[2], Row)
    assert (
        rows[1].error
        == f"row at index 1: line 2: over {MAX_LINE_BYTES:,} bytes in one row (the limit), not read"
    )
    assert peak < 3 * MAX_LINE_BYTES, peak
    assert count_rows(src) == 3
    # a line just under the limit is still read and checked as a row (its state is over the state limit)
    near = tmp_path / "near.jsonl"
    near.write_text(json.dumps({"id": "n", "state": "y" * (MAX_LINE_BYTES - 100)}) + "\n")
    (row,) = _rows(near, questions=QS)
    assert row.error == f"row n: state: {MAX_LINE_BYTES - 100:,} bytes of text, limit 2,097,152"


def _stdin_cli(*args, data: bytes, preexec=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "openjev_batch", *map(str, args)]
    return subprocess.run(
        cmd, input=data, capture_output=True, cwd=ROOT, env=env, timeout=600, preexec_fn=preexec
    )


def test_stdin_is_sniffed_past_a_bom_and_through_gzip(tmp_path, qfile):
    """A UTF-8 BOM on stdin was sniffed as CSV, and gzip on stdin parsed as CSV: both are read as what
    they hold (JSONL here; a gzipped CSV stays CSV)."""
    jsonl = b'{"id": "a", "state": "hi"}\n{"id": "b", "state": "yo"}\n'
    for data in (b"\xef\xbb\xbf" + jsonl, gzip.compress(jsonl), gzip.compress(b"\xef\xbb\xbf" + jsonl)):
        r = _stdin_cli("validate", "-", "-q", qfile, data=data)
        assert r.returncode == 0 and b"2 rows, 2 questions, 0 questions with errors" in r.stdout, r.stdout + r.stderr
    r = _stdin_cli("validate", "-", "-q", qfile, data=gzip.compress(b"id,state\na,hi\n"))
    assert r.returncode == 0 and b"1 row, 1 question, 0 questions with errors" in r.stdout, r.stdout + r.stderr
    r = _stdin_cli("validate", "-", "-q", qfile, data=b"\x1f\x8b" + b"not gzip" * 10)
    assert (
        r.returncode == 4 and b"error: -: standard input starts like gzip but does not decompress" in r.stderr
    )


def test_stdin_with_no_room_for_its_copy_is_a_job_error(tmp_path, qfile):
    """`validate -` with a full TMPDIR ended in an OSError traceback (`run -` exited 4): both exit 4 with
    one line. A file-size limit stands in for the full disk (Python ignores SIGXFSZ: the write fails)."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))

    data = b'{"id": "a", "state": "hi"}\n' * 10_000  # 270 KB
    out = tmp_path / "o.parquet"
    for args in (["validate", "-", "-q", qfile], ["run", "-", "-q", qfile, "-m", "M", "-b", "hf", "-o", out]):
        r = _stdin_cli(*args, data=data, preexec=small_files)
        text = " ".join(r.stderr.decode().split())
        assert r.returncode == 4 and "Traceback" not in text and text.count("error:") == 1, text
        assert text.startswith("error: -: cannot copy standard input to a temporary file in "), text


@pytest.mark.filterwarnings("ignore::openjev_batch.errors.InputWarning")  # random files: suspect fields
def test_the_csv_record_scan_agrees_with_the_csv_module(tmp_path):
    """The quote-aware scan finds each record's lines before the csv module parses them: on random files
    of quotes, commas and line ends (well-formed and not), the rows read are the csv module's own rows of
    the whole file, whatever the read size (a small _PIECE splits lines, quotes and `""` pairs)."""
    import csv
    import io
    import random

    from openjev_batch.pipeline.input.formats import csv_records

    rng = random.Random(25)
    alphabet = ["a", "b ", ",", '"', '""', "\n", "é"]  # no line of spaces only: a blank line is skipped
    unterminated = 0
    for case in range(400):
        if case % 2:  # well-formed: csv.writer quotes what needs it
            cells = [
                ["".join(rng.choices(alphabet, k=rng.randint(0, 6))) for _ in range(3)] for _ in range(5)
            ]
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows([["x", "y", "z"], *cells])
            text = buf.getvalue()
        else:  # anything: quotes opened mid-field, closed into text, never closed
            text = "x,y,z\n" + "".join(rng.choices(alphabet, k=60)) + "\n"
        path = tmp_path / "t.csv"
        path.write_text(text, encoding="utf-8")
        want = [w for w in list(csv.reader(io.StringIO(text, newline=""), strict=False))[1:] if w]
        for piece in (1 << 20, 3):
            csv_records._PIECE = piece
            try:
                got = [rec for c in csv_records.record_chunks(open(path, "rb"), "t", 100) for _, rec in c]
            except InputFileError as e:
                assert "never closed" in str(e) and case % 2 == 0, text
                unterminated += piece == 3
                continue
            finally:
                csv_records._PIECE = 1 << 20
            assert len(got) == len(want), text
            for g, w in zip(got, want, strict=True):
                if isinstance(g, dict):
                    assert [g[k] or "" for k in "xyz"] == w, text
                else:
                    assert len(w) != 3 and "fields, the header has 3" in g or "1 field," in g, (g, w)
    assert 10 < unterminated < 190  # both kinds of random file were met
    # a byte-order mark is not part of the first column's name, also when a read holds it alone
    path.write_bytes(b"\xef\xbb\xbfx,y,z\n1,2,3\n")
    for piece in (1 << 20, 3):
        csv_records._PIECE = piece
        try:
            got = [rec for c in csv_records.record_chunks(open(path, "rb"), "t", 100) for _, rec in c]
        finally:
            csv_records._PIECE = 1 << 20
        assert got == [{"x": "1", "y": "2", "z": "3"}], piece


def test_a_csv_with_classic_mac_line_ends_is_refused_not_read_as_no_rows(tmp_path, qfile):
    """CR-only line ends read as one header line and 'no rows' before (issue 25's leftover)."""
    mac = tmp_path / "mac.csv"
    mac.write_bytes(b"id,state\ra,hello\rb,world\r")
    r = cli("validate", mac, "-q", qfile)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "mac.csv: cannot read as CSV: its lines end in CR alone" in r.stderr, r.stderr
    one = tmp_path / "one.csv"  # a header with a CR line end alone is still a header with no rows
    one.write_bytes(b"id,state\r")
    assert "CR alone" not in cli("validate", one, "-q", qfile).stderr


def test_a_jsonl_with_classic_mac_line_ends_is_refused_not_read_as_one_row(tmp_path, qfile):
    """CR-only line ends: readline saw one line, so rows b and c vanished inside row 0's "malformed JSON
    (Extra data)" error, named by no row (the hostile trial). Refused as the CSV reader does."""
    mac = tmp_path / "mac.jsonl"
    mac.write_bytes(b'{"id":"a","state":"x"}\r{"id":"b","state":"y"}\r{"id":"c","state":"z"}\r')
    r = cli("validate", mac, "-q", qfile)
    assert r.returncode == 4, r.stdout + r.stderr
    assert "cannot read as JSONL: its lines end in CR alone" in r.stderr and "Traceback" not in r.stderr
    for ok in (b'{"id":"a","state":"x"}\r', b'{"id":"a","state":"x"}\r\n{"id":"b","state":"y"}\r\n'):
        mac.write_bytes(ok)  # one row with a CR end, and CRLF, are still read
        assert cli("validate", mac, "-q", qfile).returncode == 0


@pytest.mark.parametrize(
    "name, data, line",
    [
        ("last.jsonl", b'{"id":"k0","state":"a"}\n{"id":"k1","state":"b"}\r{"id":"k2","state":"c"}\r', 2),
        ("mid.jsonl", b'{"id":"k0","state":"a"}\n{"id":"k1","state":"b"}\r{"id":"k2","state":"c"}\r\n'
         b'{"id":"k3","state":"d"}\n', 2),
        ("mid.csv", b"id,state\nk0,a\nk1,b\rk2,c\r\nk3,d\n", 3),
        ("last.csv", b"id,state\nk0,a\nk1,b\rk2,c\r", 3),
    ],
)  # fmt: skip
def test_mixed_line_ends_are_refused_on_any_line(tmp_path, qfile, name, data, line):
    """Issue 34.15: the CR-only check looked at the first line alone, so a CR line end later joined two rows
    and the second vanished inside the first's "malformed" error (rc 3, a row short)."""
    path = tmp_path / name
    path.write_bytes(data)
    r = cli("validate", path, "-q", qfile)
    assert r.returncode == 4, r.stdout + r.stderr
    assert f"line {line}: a CR alone ends a line inside it (mixed line ends)" in " ".join(r.stderr.split())


def test_a_cr_inside_a_row_that_parses_is_read(tmp_path, qfile):
    """The mixed-line-end check looks only at a row that failed: a CR inside a quoted CSV cell is its text,
    and one between JSON tokens is JSON whitespace."""
    (tmp_path / "q.csv").write_bytes(b'id,state\nk0,"a\rb"\nk1,c\n')
    (tmp_path / "ws.jsonl").write_bytes(b'{"id":"k0",\r"state":"a"}\n{"id":"k1","state":"b"}\n')
    for name in ("q.csv", "ws.jsonl"):
        r = cli("validate", tmp_path / name, "-q", qfile)
        assert r.returncode == 0 and "2 rows" in r.stdout, r.stdout + r.stderr


def test_a_tsv_quote_swallowing_lines_is_warned_in_tabs(tmp_path, qfile):
    """The swallowing-quote warning counted a TSV's delimiters as 'commas'."""
    tsv = tmp_path / "t.tsv"
    tsv.write_text('id\tstate\na\t"I said\nb\thello\nc\tbye"\nd\tok\n')
    r = cli("validate", tsv, "-q", qfile)
    said = " ".join(r.stderr.split())
    assert "as many tabs as a row" in said and "commas" not in said, r.stderr


def test_a_yaml_list_key_is_a_config_error_not_a_traceback(tmp_path):
    """`? [1, 2]` (a YAML complex key) raised TypeError: unhashable type: 'list', exit 1 with a traceback."""
    qf = tmp_path / "q.yaml"
    qf.write_text("a: {type: noul, instructions: x}\n? [1, 2]\n: {type: noul, instructions: y}\n")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x"}) + "\n")
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 4 and "a key must be a name, not a sequence" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_nan_and_inf_kept_values_are_null_in_json_outputs(tiny_model, tmp_path):
    """A kept float column with NaN / inf was written as bare `NaN` / `Infinity` tokens: polars' read_ndjson
    and strict JSON parsers refused the output (the hostile trial). JSON has no NaN: null, as pandas writes."""
    import pyarrow.parquet as pq

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "state": ["x", "y", "z"],
                             "score_in": [float("nan"), 1.5, float("inf")]}), src)  # fmt: skip
    q = tmp_path / "q.yaml"
    q.write_text("u: {type: noul, instructions: 'Urgent?'}\n")
    for suffix in ("jsonl", "json"):
        out = tmp_path / f"o.{suffix}"
        r = cli("run", src, "-q", q, "-m", tiny_model, "-b", "hf", "--keep", "score_in", "--no-progress", "-o", out)
        assert r.returncode == 0, r.stderr
        text = out.read_text()
        assert "NaN" not in text and "Infinity" not in text
        rows = json.loads(text) if suffix == "json" else [json.loads(line) for line in text.splitlines()]
        assert [(r["id"], r["score_in"]) for r in rows] == [("a", None), ("b", 1.5), ("c", None)]
        assert all(r["error"] is None for r in rows)
    assert pl.read_ndjson(tmp_path / "o.jsonl")["score_in"].to_list() == [None, 1.5, None]


def test_a_column_named_twice_in_parquet_or_datasets_is_refused(tmp_path, qfile):
    """Issue 34.16: `id, state, state` in a Parquet file or a datasets folder answered from the last `state`,
    silently; refused as a CSV header naming a column twice is."""
    import pyarrow.parquet as pq

    t = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array(["first"]), pa.array(["last"])], ["id", "state", "state"]
    )
    pq_path = tmp_path / "dup.parquet"
    pq.write_table(t, pq_path)
    _one_error(
        cli("validate", pq_path, "-q", qfile), "dup.parquet: the Parquet schema names column(s) 'state' twice"
    )
    ds = _arrow_folder(tmp_path / "ds", [pa.table({"id": ["a"], "state": ["x"]}), t])
    _one_error(
        cli("validate", ds, "-q", qfile),
        "data-00001-of-00002.arrow: the Arrow schema names column(s) 'state' twice",
    )


def test_a_csv_of_100000_columns_reads_whole(tmp_path, qfile):
    """Issue 34.18: a 100,000-column CSV took 10.5 min to validate: the header's repeated-name check counted
    each name in the whole header (100,000² comparisons, once per read of the header). Every row comes out
    with its columns, `validate` answers (it timed out here before), and a name repeated at the far end is
    still refused, named."""
    n = 100_000
    names = ["id", "state", *(f"c{i}" for i in range(n))]
    cells = ",".join(map(str, range(n)))
    src = tmp_path / "wide.csv"
    src.write_text(",".join(names) + "\n" + "".join(f"r{k},text {k},{cells}\n" for k in range(3)))
    rows = _rows(src, questions=QS, keep=("c0", f"c{n - 1}"))
    assert [(r.id, r.kept) for r in rows] == [(f"r{k}", {"c0": "0", f"c{n - 1}": str(n - 1)}) for k in range(3)]
    r = cli("validate", src, "-q", qfile, "--keep", f"c{n - 1}")
    assert r.returncode == 0 and "3 rows, 3 questions, 0 questions with errors" in r.stdout + r.stderr, r.stderr
    dup = tmp_path / "dup.csv"
    dup.write_text(",".join([*names, "c5"]) + "\n" + f"r,text,{cells},5\n")
    with pytest.raises(InputFileError, match=r"names column\(s\) 'c5' twice"):
        _rows(dup, questions=QS)


def test_a_parquet_struct_with_two_fields_of_one_name_is_one_plain_line(tmp_path, qfile):
    """Issue 48.8: a struct column whose two fields share a name read pyarrow's "Converting to Python
    dictionary is not supported when duplicate field names are present"; it says which column and name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"])
    pq.write_table(pa.table({"id": ["a"], "state": ["hi"], "meta": meta}), tmp_path / "dup.parquet")
    r = cli("validate", tmp_path / "dup.parquet", "-q", qfile)
    assert r.returncode == 4, r.stdout + r.stderr
    assert " ".join(r.stderr.split()) == (
        f"error: {tmp_path / 'dup.parquet'}: cannot read as Parquet: column 'meta': a struct with two fields "
        "named 'x' (a row is read as a mapping, whose names are unique); rename one"
    )
