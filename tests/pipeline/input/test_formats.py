"""Input and output formats (CSV, JSON, compressed JSONL, a `datasets` folder, stdin; Parquet/JSONL/CSV out),
`--limit`, `--dry-run` without `-o`, and the small habits of the command line, on the real CLI."""

from __future__ import annotations

import csv
import gzip
import json
import subprocess
import sys

import polars as pl
import pyarrow as pa
import pytest
from conftest import EXAMPLES, ROOT, cli, write_jsonl

from openjev_batch.core import RowError
from openjev_batch.errors import InputFileError
from openjev_batch.pipeline.input.read import read_rows
from openjev_batch.readouts.label_logprobs.rows import Row

Q = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "kind": {"type": "choice", "instructions": "Kind?", "criteria": {"billing": None, "bug": "a defect"}},
}
ROWS = [
    {"id": "007", "state": "I want my money back.", "questions": Q, "channel": "mail"},
    {"id": "b", "state": [{"role": "user", "content": "The app crashes"}], "questions": Q, "channel": "chat"},
    {"id": "c", "state": "Invoice is wrong, twice", "questions": Q, "channel": None},
]


def save_hf_dataset(records: list[dict], folder) -> None:
    """A folder as `datasets.Dataset.save_to_disk` writes it: Arrow IPC stream files + state.json
    (the real library when installed; else the same layout by hand: data-*.arrow, state.json,
    dataset_info.json)."""
    try:
        import datasets
    except ImportError:
        folder.mkdir()
        table = pa.Table.from_pylist(records)
        with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as f:
            with pa.ipc.new_stream(f, table.schema) as w:
                w.write_table(table)
        (folder / "state.json").write_text(
            json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": None})
        )
        (folder / "dataset_info.json").write_text("{}")
        return
    datasets.Dataset.from_list(records).save_to_disk(str(folder))


def _flat(rows: list[dict]) -> list[dict]:
    """Rows as a CSV or a datasets folder holds them: state and questions as JSON text where nested."""
    return [
        {
            **r,
            "state": r["state"] if isinstance(r["state"], str) else json.dumps(r["state"]),
            "questions": json.dumps(r["questions"]),
        }
        for r in rows
    ]


@pytest.fixture
def inputs(tmp_path):
    """The same three rows in every input format."""
    p = {"jsonl": write_jsonl(tmp_path / "in.jsonl", ROWS)}
    data = p["jsonl"].read_bytes()
    p["gz"] = tmp_path / "in.jsonl.gz"
    p["gz"].write_bytes(gzip.compress(data))
    zstd = pytest.importorskip("zstandard")
    p["zst"] = tmp_path / "in.jsonl.zst"
    p["zst"].write_bytes(zstd.ZstdCompressor().compress(data))
    p["json"] = tmp_path / "in.json"
    p["json"].write_text(json.dumps(ROWS))
    p["csv"] = tmp_path / "in.csv"
    with open(p["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROWS[0]))
        w.writeheader()
        w.writerows(_flat(ROWS))
    p["parquet"] = tmp_path / "in.parquet"
    pl.DataFrame(_flat(ROWS)).write_parquet(p["parquet"])
    p["hf"] = tmp_path / "hf_ds"
    save_hf_dataset(_flat(ROWS), p["hf"])
    return p


def _key(r: Row | RowError):
    assert isinstance(r, Row), r
    return (r.id, r.messages, r.questions, r.kept)


def test_every_input_format_reads_the_same_rows(inputs):
    want = [_key(r) for c in read_rows(inputs["jsonl"], keep=("channel",)) for r in c]
    assert [w[0] for w in want] == ["007", "b", "c"]  # the CSV keeps "007" as text, not 7
    for name, path in inputs.items():
        got = [_key(r) for c in read_rows(path, keep=("channel",), chunk_rows=2) for r in c]
        assert got == want, name
    assert [r.id for c in read_rows(inputs["csv"], limit=2) for r in c] == ["007", "b"]
    with pytest.raises(InputFileError, match="--keep column.*nope"):
        next(read_rows(inputs["hf"], keep=("nope",)))
    with pytest.raises(InputFileError, match="--keep column.*nope"):
        next(read_rows(inputs["csv"], keep=("nope",)))


def test_datasetdict_folder_names_its_splits(tmp_path):
    d = tmp_path / "dd"
    d.mkdir()
    (d / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    with pytest.raises(InputFileError, match="pass one split's folder.*dd/train"):
        next(read_rows(d))


def test_formats_through_the_cli(tiny_model, inputs, tmp_path):
    """stdin → CSV out and a datasets folder → JSONL out (with --limit and --threads) give the reference
    run's answers; CSV holds options/probs as JSON text."""
    common = ["-m", tiny_model, "-b", "hf", "--no-progress", "--keep", "channel"]
    ref = tmp_path / "ref.parquet"
    r = cli("run", inputs["jsonl"], "-o", ref, *common)
    assert r.returncode == 0, r.stderr
    want = pl.read_parquet(ref)

    out_csv = tmp_path / "o.csv"
    env_cmd = [sys.executable, "-m", "openjev_batch", "run", "-", "-o", str(out_csv), *map(str, common)]
    with open(inputs["jsonl"], "rb") as stdin:
        r = subprocess.run(env_cmd, stdin=stdin, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    with open(out_csv, newline="") as f:
        got = list(csv.DictReader(f))
    assert [g["id"] for g in got] == want["id"].to_list() and got[0]["id"] == "007"
    assert [json.loads(g["probs"]) for g in got] == want["probs"].to_list()
    assert json.loads(got[0]["options"]) == ["true", "false"] and got[0]["error"] == ""

    out_jsonl = tmp_path / "o.jsonl"
    r = cli("run", inputs["hf"], "-o", out_jsonl, *common, "--limit", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in out_jsonl.read_text().splitlines()]
    assert len(got) == 2 * len(Q) and [g["id"] for g in got] == want["id"].to_list()[:4]
    assert [g["probs"] for g in got] == want["probs"].to_list()[:4]
    assert got[0]["channel"] == "mail"

    r = cli("run", "-", "-o", out_jsonl, *common, "--resume")
    assert r.returncode == 4 and "standard input cannot be read again" in r.stderr


def test_dry_run_needs_no_output_and_names_the_backend(tiny_model):
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model,
            "-b", "hf", "--dry-run")  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "expected cache hit rate, hf (this run's backend)" in text
    assert "expected cache hit rate, sglang" in text and "identical prefixes only" in text
    assert "request pattern, if run on sglang" in text  # not read as this hf run's (new-user trial)
    r = cli("run", EXAMPLES / "tickets.jsonl", "-m", tiny_model, "-b", "hf")
    assert r.returncode == 2 and "only --dry-run and --show-prompt run without it" in " ".join(
        r.stderr.split()
    )


def test_small_habits(tmp_path):
    from openjev_batch import __version__

    r = cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"openjev-batch {__version__}"
    for args in (["-h"], ["run", "-h"], ["models", "-h"]):
        r = cli(*args)
        assert r.returncode == 0 and "Usage" in r.stdout, args
    r = cli("classify", "--help")
    # classify lists only what it does: its readout's options (it resumes like run since #18), no questions
    assert r.returncode == 0 and "--questions" not in r.stdout and "--template" in r.stdout
    # --threads: the environment is set before torch loads, and torch uses that many threads
    code = (
        "import os; from openjev_batch.threads import apply_threads; apply_threads(1); import torch; "
        "print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.split() == ["1", "1"], done.stderr


def test_yaml_true_false_keys_and_text_column_hint(tmp_path):
    from openjev_batch.readouts.label_logprobs.questions import load_questions

    qf = tmp_path / "q.yaml"
    qf.write_text(
        "refund:\n  type: noul\n  instructions: Refund?\n  criteria:\n    true: asks for money back\n"
        "    False: anything else\n"
        "answer:\n  type: choice\n  instructions: Agree?\n  criteria:\n    yes: agrees\n    no: disagrees\n"
    )
    (refund, answer) = load_questions(qf)
    assert refund.descriptions == ("asks for money back", "anything else")
    assert answer.options == ("yes", "no")  # not True/False
    # one row without `state` among others is that row's error, with the hint; no row with one is the job's
    p = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "text": "hello"}, {"id": "b", "state": "hi"}])
    r = cli("validate", p, "-q", qf)
    assert r.returncode == 3
    assert "row a: state: missing (the row has a 'text' column: rename it to 'state'" in " ".join(
        r.stderr.split()
    )
    p = write_jsonl(tmp_path / "t.jsonl", [{"id": "a", "text": "hello"}])
    r = cli("validate", p, "-q", qf)
    assert r.returncode == 4 and "(the rows have: id, text)" in r.stderr, r.stderr
    assert "rename the column that holds it to 'state' (`classify` reads 'text')" in r.stderr


def test_job_rows_reads_a_job_and_hashes_what_it_read(tmp_path):
    """pipeline.read.job_rows, the one reader of the local loop and the Ray driver: the config's chunking
    and limit, and the input's sha256 up to each chunk's end (the --resume ledger's key)."""
    import hashlib

    from openjev_batch.config import build_config
    from openjev_batch.pipeline.input.read import job_rows
    from openjev_batch.readouts.label_logprobs import LabelLogprobs

    src = tmp_path / "in.jsonl"
    lines = [json.dumps({"id": f"r{i}", "state": f"s{i}"}) + "\n" for i in range(5)]
    src.write_text("".join(lines))
    cfg = build_config(input=src, output=tmp_path / "o.parquet", model="m", backend="hf", chunk_rows=2)
    chunks, digest = job_rows(cfg, LabelLogprobs(None))
    seen = []
    for chunk in chunks:
        seen.append([r.id for r in chunk])
        n = sum(len(c) for c in seen)
        assert digest.hexdigest() == hashlib.sha256("".join(lines[:n]).encode()).hexdigest()
    assert seen == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    limited = build_config(input=src, output=tmp_path / "o.parquet", model="m", backend="hf", limit=3)
    assert [r.id for c in job_rows(limited, LabelLogprobs(None))[0] for r in c] == ["r0", "r1", "r2"]


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """Hostile trial: `id,state,state` answered from the last `state`, exit 0; now the file is refused."""
    src = tmp_path / "dup.csv"
    src.write_text("id,state,state\n1,a,b\n")
    r = cli("validate", src)
    assert r.returncode == 4 and "names column(s) 'state' twice" in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["out.json", "out.jsonl.gz", "out.tsv", "out.jsonl", "out.csv"])
def test_table_writer_formats_read_back(tmp_path, name):
    """The output formats a new user asked for (issue 26): .json (one array), .jsonl.gz, .tsv, beside
    .jsonl and .csv; each read back gives the rows written, nested columns as JSON text in CSV/TSV."""
    from openjev_batch.options import output_format
    from openjev_batch.pipeline.output.write import TableWriter

    t = pa.table({"id": ["a", "b\tc"], "probs": [[0.25, 0.75], None], "n": [1, None]})
    path = tmp_path / name
    with TableWriter(path, t.schema, output_format(path)) as w:
        w.write_table(t.slice(0, 1))
        w.write_table(t.slice(1))
    rows = t.to_pylist()
    if name.endswith(".json"):
        assert json.loads(path.read_text()) == rows
    elif name.endswith((".jsonl", ".gz")):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            assert [json.loads(x) for x in f] == rows
    else:
        delim = "\t" if name.endswith(".tsv") else ","
        got = list(csv.DictReader(path.open(encoding="utf-8", newline=""), delimiter=delim))
        assert [r["id"] for r in got] == ["a", "b\tc"] and json.loads(got[0]["probs"]) == [0.25, 0.75]
        assert got[1]["probs"] == "" and path.read_text().count(delim) >= 4


def test_output_format_refuses_others_naming_the_choices():
    from openjev_batch.options import output_format

    assert [output_format(p) for p in ("a.JSONL.GZ", "a.json", "a.tsv", "a.b.parquet")] == [
        "jsonl.gz", "json", "tsv", "parquet"
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"\.jsonl\.gz, \.json, \.csv or \.tsv file \(or - for standard"):
        output_format("a.xlsx")


def test_tsv_input_reads_as_csv_with_tabs(tmp_path):
    """TSV input (issue 26): the CSV reader with a tab for the comma; a quoted cell may hold a tab."""
    from openjev_batch.pipeline.input.formats import input_columns, record_chunks

    p = tmp_path / "in.tsv"
    p.write_text('id\tstate\n1\tplain, with a comma\n2\t"a\ttab"\n', encoding="utf-8")
    assert input_columns(p) == {"id", "state"}
    recs = [r for chunk in record_chunks(p, 10) for _, r in chunk]
    assert recs == [{"id": "1", "state": "plain, with a comma"}, {"id": "2", "state": "a\ttab"}]
    gz = tmp_path / "in.tsv.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert [r for chunk in record_chunks(gz, 10) for _, r in chunk] == recs


def test_may_have_images_reads_every_format_before_the_engine_starts(tmp_path):
    """Issue 41: whether any row may carry an image (an `image` / `images` column, an image part of a message
    as JSON text or Arrow structs), over the whole input, before the engine starts. A key inside a string
    value of a JSONL row (escaped quotes) is no image; a key cut between two read pieces is found."""
    import pyarrow.parquet as pq

    from openjev_batch.pipeline.input.formats import may_have_images
    from openjev_batch.pipeline.input.formats.base import scan_for_image_keys

    msgs = [{"role": "user", "content": [{"type": "image", "image": "a.png"}]}]
    text = [{"id": i, "state": f"row {i}"} for i in range(3)]
    cases = {
        "text.jsonl": (text, False),
        "quoted.jsonl": ([{"id": 1, "state": 'he said "image": no'}], False),
        "late.jsonl": ([*text, {"id": 9, "state": "x", "images": ["a.png"]}], True),
        "parts.jsonl": ([{"id": 1, "state": msgs}], True),
    }
    for name, (rows, want) in cases.items():
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert may_have_images(tmp_path / name) is want, name
    (tmp_path / "a.csv").write_text("id,state\n1,x\n")
    (tmp_path / "b.csv").write_text("id,state,image\n1,x,a.png\n")
    (tmp_path / "c.csv").write_text('id,state\n1,"' + json.dumps(msgs).replace('"', '""') + '"\n')
    assert [may_have_images(tmp_path / f) for f in ("a.csv", "b.csv", "c.csv")] == [False, True, True]
    tables = {
        "text.parquet": (pa.table({"id": [1], "state": ["x"]}), False),
        "column.parquet": (pa.table({"id": [1], "image": [b"png"]}), True),
        "json.parquet": (pa.table({"id": [1, 2], "state": ["x", json.dumps(msgs)]}), True),
        "structs.parquet": (pa.table({"id": [1], "state": [msgs]}), True),
    }
    for name, (t, want) in tables.items():
        pq.write_table(t, tmp_path / name)
        assert may_have_images(tmp_path / name) is want, name
    key = b'{"id": 1, "image": "a.png"}'
    assert scan_for_image_keys([key[:6], key[6:12], key[12:]]) and not scan_for_image_keys([b'{"id": 1}'])
