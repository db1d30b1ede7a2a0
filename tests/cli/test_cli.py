"""The real `openjev-batch` command on the tiny model: exit codes, every output column, bad rows."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest
from conftest import EXAMPLES, ROOT, cli, sglang_cpu_env, write_jsonl

COLUMNS = [
    "id",
    "question_id",
    "type",
    "options",
    "probs",
    "answer",
    "p_true",
    "score",
    "confidence",
    "label_mass",
    "prefix_tokens",
    "branch_tokens",
    "cached_tokens",
    "error",
    "chosen",
    "order_spread",
]


def test_run_tickets_every_column(tiny_model, tmp_path):
    out = tmp_path / "out.parquet"
    r = cli(
        "run",
        EXAMPLES / "tickets.jsonl",
        "-q",
        EXAMPLES / "ticket_questions.yaml",
        "-o",
        out,
        "-m",
        tiny_model,
        "-b",
        "hf",
        "--keep",
        "channel",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr
    assert "answered" in r.stderr and "cache hit rate" in r.stderr
    assert "Loading weights" not in r.stderr  # --no-progress silences transformers' bar too
    df = pl.read_parquet(out)
    n_rows = sum(1 for line in open(EXAMPLES / "tickets.jsonl") if line.strip())
    assert df.columns == COLUMNS + ["answer_key", "channel"]  # the answer key (run --reuse) before the kept
    assert df["answer_key"].null_count() == 0 and df["answer_key"].n_unique() == n_rows  # one per row
    assert df.height == 3 * n_rows and df["error"].null_count() == df.height
    assert df["id"].unique(maintain_order=True).to_list()[:2] == ["T001", "T002"]  # input order
    assert df["question_id"].to_list()[:3] == ["refund_request", "category", "urgency"]
    for rec in df.iter_rows(named=True):
        assert math.isclose(sum(rec["probs"]), 1.0, rel_tol=1e-9)
        assert rec["answer"] == rec["options"][max(range(len(rec["probs"])), key=rec["probs"].__getitem__)]
        assert 0.0 <= rec["confidence"] <= 1.0 and 0.0 < rec["label_mass"] <= 1.0
        assert rec["branch_tokens"] > rec["prefix_tokens"] > 0
        # each row's prefix pass is counted in its first question; the others reuse it
        first = rec["question_id"] == "refund_request"
        assert rec["cached_tokens"] == (0 if first else rec["prefix_tokens"])
        if rec["type"] == "noul":
            assert (
                rec["options"] == ["true", "false"]
                and rec["p_true"] == rec["probs"][0]
                and rec["score"] is None
            )
        elif rec["type"] == "score":
            assert len(rec["options"]) == 5
            assert rec["score"] == pytest.approx(sum(i * p for i, p in enumerate(rec["probs"])))
        else:
            assert len(rec["options"]) == 8 and rec["p_true"] is None and rec["score"] is None
    # readable unchanged by pandas and duckdb
    assert len(pd.read_parquet(out)) == df.height
    assert duckdb.sql(f"select count(*), sum(len(probs)) from '{out}'").fetchall() == [
        (df.height, n_rows * 15)
    ]
    assert not out.with_name(out.name + ".partial").exists()
    # issue 34.8: the records' cached tokens are the summary's (the quick start: 43 % against 28.8 % before)
    branch, cached = df["branch_tokens"].sum(), df["cached_tokens"].sum()
    rows = dict(re.findall(r"│ ([a-z ]+?) +│ ([^│]+?) +│", r.stderr))
    assert int(rows["computed tokens"].replace(",", "")) == branch - cached
    assert rows["cache hit rate"] == f"{cached / branch:.1%}"


def test_bad_rows_are_reported_and_the_rest_answered(tiny_model, tmp_path):
    q = {
        "u": {"type": "score", "instructions": "Urgent?", "criteria": ["low", "high"]},
        "c": {"type": "choice", "instructions": "Kind?", "criteria": {"a": None, "b": None}},
    }
    bad_q = {**q, "u": {"type": "score", "instructions": "Urgent?", "criteria": ["only"]}}
    p = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "ok", "state": "fine", "questions": q, "src": "a"},
            {"id": "T7", "state": "x", "questions": bad_q},
            "{not json",
            {"id": "empty", "state": [], "questions": q},
            {"id": "ok2", "state": [{"role": "user", "content": "hi"}], "questions": q},
        ],
    )
    out = tmp_path / "o.parquet"
    r = cli("run", p, "-o", out, "-m", tiny_model, "-b", "hf", "--no-progress", "--keep", "src")
    assert r.returncode == 3, r.stderr  # --keep with an unreadable line: its kept cells are null
    df = pl.read_parquet(out)
    got = {(a, b): e for a, b, e in df.select("id", "question_id", "error").iter_rows()}
    assert got[("T7", "u")] == "row T7: questions.u.criteria: score needs 2–64 levels, got 1"
    assert got[("T7", "c")] is None and got[("ok", "u")] is None and got[("ok2", "c")] is None
    assert got[(None, None)].startswith("row at index 2: line 3: malformed JSON")
    assert got[("empty", "u")] == got[("empty", "c")] == "row empty: state: empty conversation"
    assert df.height == 2 + 2 + 1 + 2 + 2
    assert df["src"].to_list()[:2] == ["a", "a"] and df["src"].null_count() == df.height - 2


@pytest.mark.parametrize(
    "args,msg",
    [
        (["run", "nope.jsonl", "-o", "x.parquet", "-m", "M", "-b", "hf"], "no such file"),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.txt", "-m", "M", "-b", "hf"],
            "output must be a .parquet, .jsonl, .jsonl.gz, .json, .csv or .tsv file",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "M", "-b", "vllm"],
            "unknown backend 'vllm'",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "M", "-b", "hf", "--keep", "score"],
            "keep: --keep column(s) score clash with output columns",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "examples", "-m", "M", "-b", "hf"],
            "output must be a .parquet, .jsonl, .jsonl.gz, .json, .csv or .tsv file",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "docs.parquet/x.parquet", "-m", "M", "-b", "hf"],
            "does not exist",
        ),
        (
            [
                "run",
                "examples/tickets.jsonl",
                "-o",
                "x.parquet",
                "-m",
                "M",
                "-b",
                "hf",
                "--keep",
                "channel,channel",
            ],
            "a column is named twice",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "M", "-b", "hf", "--keep", "chanel"],
            "--keep column(s) in none of the first 1,000 rows: chanel",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "/no/model", "-b", "hf"],
            "model /no/model: no such folder",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "smollm2", "-b", "hf"],
            "did you mean smollm2-135m?",
        ),
        (
            ["run", "examples/tickets.jsonl", "-q", "examples/ticket_questions.yaml", "-o", "x.parquet", "-m", "M", "-b", "hf"],
            "cannot load model 'M'",
        ),
        (
            ["run", "examples/tickets.jsonl", "-o", "x.parquet", "-m", "M", "-b", "hf", "-q", "missing.yaml"],
            "no such file",
        ),
    ],
)
def test_job_level_errors_are_messages_not_tracebacks(args, msg, tmp_path):
    r = cli(*args)
    assert r.returncode == 4, r.stderr
    assert msg in " ".join(r.stderr.split()) and "Traceback" not in r.stderr


def test_validate(tmp_path):
    r = cli("validate", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml")
    assert r.returncode == 0 and "0 questions with errors" in r.stdout
    p = write_jsonl(
        tmp_path / "v.jsonl",
        [{"id": "a", "state": "x", "questions": {"k": {"type": "rank", "instructions": "?"}}}],
    )
    r = cli("validate", p)
    assert r.returncode == 3 and "questions.k.type: unknown question type 'rank'" in r.stderr



def _trial_parquet(path: Path) -> Path:
    """The new-user trial's file: 5 rows, a bad criteria list, a duplicate id and an empty state."""
    one = {"u": {"type": "noul", "instructions": "Urgent?"}}
    two = {**one, "k": {"type": "choice", "instructions": "Kind?", "criteria": ["a"]}}
    pl.DataFrame([
        {"id": "r1", "state": "hi", "questions": json.dumps(one)},
        {"id": "r2", "state": "hi", "questions": json.dumps(two)},  # k: a list, not an object
        {"id": "r1", "state": "hi", "questions": json.dumps(one)},  # the id again
        {"id": "r4", "state": "", "questions": json.dumps(one)},  # empty
        {"id": "r5", "state": "fine", "questions": json.dumps(one)},
    ]).write_parquet(path)  # fmt: skip
    return path


def _summary_row(text: str, key: str) -> str:
    m = re.search(rf"^\W*{re.escape(key)}\s*│\s*(.*?)\s*│?$", text, re.M)
    assert m, text
    return m.group(1)


def test_validate_counts_questions_and_errors_as_run_does(tiny_model, tmp_path):
    # the trial: validate said "5 rows, 4 questions, 3 errors" (the refused rows' questions left out, errors
    # counted per message) where run said "questions 6, answered 3, errors 3"
    src = _trial_parquet(tmp_path / "in.parquet")
    v = cli("validate", src)
    assert v.returncode == 3, v.stderr
    assert v.stdout.startswith("5 rows, 6 questions, 3 questions with errors ("), v.stdout
    out = tmp_path / "out.parquet"
    r = cli("run", src, "-m", tiny_model, "-b", "hf", "--no-progress", "-o", out)
    assert r.returncode == 3, r.stderr
    df = pl.read_parquet(out)
    assert (df.height, df["error"].is_not_null().sum()) == (6, 3)
    assert (_summary_row(r.stderr, "questions"), _summary_row(r.stderr, "errors")) == ("6", "3")


def test_validate_says_what_its_five_kinds_leave_out(tmp_path):
    """The counts line shows the five commonest error kinds; past five it said nothing of the rest, and a trial
    read kinds adding up to 7 of 9 errors as all of them. The rest is counted: the kinds add up to the total."""
    q = {"type": "noul", "instructions": "x"}
    bad = [{"type": "bogus", "instructions": "x"}, {"type": "choice", "instructions": "x", "criteria": "no"},
           {**q, "threshold": 2}, {"type": "choice", "instructions": "x", "criteria": ["a", "b"], "debias": 5},
           {**q, "instructions": 5}, {**q, "extra": 1}]  # fmt: skip
    rows = [{"id": f"r{i}", "state": "hi", "questions": {"q": b}} for i, b in enumerate(bad)]
    rows += [{"id": "e", "state": "", "questions": {"q": q}}, {"id": "ok", "state": "hi", "questions": {"q": q}}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    v = cli("validate", src)
    assert v.returncode == 3, v.stderr
    line = v.stdout.strip().splitlines()[-1]
    assert line.startswith("8 rows, 8 questions, 7 questions with errors ("), line
    assert line.endswith(", others: 2 in 2 kinds)"), line  # issue 48.8: was ", 2 more kinds: 2"
    counts = re.findall(r": (\d+)(?= in |[,)])", line)
    assert len(counts) == 6 and sum(map(int, counts)) == 7, line


def test_the_run_summary_names_the_backend_it_chose(tiny_model, tmp_path):
    # the trial: a run without -b took the default backend, and only the output's manifest said which
    from types import SimpleNamespace

    from openjev_batch.backends import SPECS, default_backend

    out = tmp_path / "out.parquet"
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", tiny_model,
            "--no-progress", "-o", out)  # fmt: skip
    assert r.returncode == 0, r.stderr
    name = default_backend()
    want = f"{name} on {SPECS[name].device(SimpleNamespace(device='auto'))}"
    assert _summary_row(r.stderr, "backend") == want
    # named where the model is: the row after it
    rows = [[c.strip() for c in line.split("│") if c.strip()] for line in r.stderr.splitlines()]
    keys = [cells[0] for cells in rows if len(cells) == 2]
    assert keys[keys.index("backend") - 1] == "model", keys


def test_validate_keep_all_checks_every_other_column_as_run_keeps_them(tmp_path):
    # `validate --keep all` was refused ("--keep column(s) in none of the first 1,000 rows: all") while
    # `run --keep all` took it
    q = {"q": {"type": "noul", "instructions": "ok?"}}
    p = write_jsonl(tmp_path / "v.jsonl", [
        {"id": "a", "state": "hi", "channel": "mail", "questions": q},
        {"id": "b", "state": "yo", "channel": {"x": [1, {"y": 2}]}, "questions": q},
    ])  # fmt: skip
    r = cli("validate", p, "--keep", "all")
    assert r.returncode == 0, r.stderr
    assert "2 rows, 2 questions, 0 questions with errors" in r.stdout

@pytest.mark.sglang
def test_sglang_backend_cli_matches_hf(tiny_model, tmp_path, monkeypatch):
    pytest.importorskip("sglang.srt")
    for k, v in sglang_cpu_env().items():
        monkeypatch.setenv(k, v)
    args = [EXAMPLES / "tickets_inline.jsonl", "-m", tiny_model, "--no-progress"]
    ra = cli("run", *args, "-o", tmp_path / "hf.parquet", "-b", "hf")
    rb = cli(
        "run", *args, "-o", tmp_path / "sg.parquet", "-b", "sglang", "--engine-arg", "max_total_tokens=50000"
    )
    assert ra.returncode == 0 and rb.returncode == 0, rb.stderr[-3000:]
    a, b = pl.read_parquet(tmp_path / "hf.parquet"), pl.read_parquet(tmp_path / "sg.parquet")
    assert a.select("id", "question_id", "answer").equals(b.select("id", "question_id", "answer"))
    for pa_, pb_ in zip(a["probs"].to_list(), b["probs"].to_list(), strict=True):
        assert max(abs(x - y) for x, y in zip(pa_, pb_, strict=True)) <= 1e-4
    rc = cli("run", *args, "-o", tmp_path / "x.parquet", "-b", "sglang", "--engine-arg", "no_such_arg=1")
    assert rc.returncode == 4 and "unknown sglang engine arg(s): no_such_arg" in rc.stderr


def test_inline_questions_jsonl_to_parquet_roundtrip(tiny_model, tmp_path):
    """Per-row questions given as nested Parquet columns answer the same as the JSONL form."""
    rows = [json.loads(line) for line in open(EXAMPLES / "tickets_inline.jsonl")]
    pl_in = tmp_path / "in.parquet"
    pl.DataFrame(
        {
            "id": [r["id"] for r in rows],
            "state": [r["state"] if isinstance(r["state"], str) else json.dumps(r["state"]) for r in rows],
            "questions": [json.dumps(r["questions"]) for r in rows],
        }
    ).write_parquet(pl_in)
    a = cli(
        "run",
        EXAMPLES / "tickets_inline.jsonl",
        "-o",
        tmp_path / "a.parquet",
        "-m",
        tiny_model,
        "-b",
        "hf",
        "--no-progress",
    )
    b = cli("run", pl_in, "-o", tmp_path / "b.parquet", "-m", tiny_model, "-b", "hf", "--no-progress")
    assert a.returncode == b.returncode == 0, b.stderr
    assert pl.read_parquet(tmp_path / "a.parquet").equals(pl.read_parquet(tmp_path / "b.parquet"))


def test_refusals_found_by_a_new_user_trial(tmp_path):
    """Each is refused before any model loads, exit 4, with a message naming the problem."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    same = tmp_path / "same.parquet"
    pq.write_table(pa.table({"id": ["a"], "state": ["hello"]}), same)
    qdup = tmp_path / "qdup.yaml"
    qdup.write_text(
        "kind:\n  type: choice\n  instructions: Which?\n  criteria:\n    a: one\n    a: two\n    b: three\n"
    )
    qtop = tmp_path / "qtop.yaml"
    qtop.write_text("ok:\n  type: noul\n  instructions: Fine?\nextra_top: 5\n")
    cases = [
        (["run", same, "-o", same, "-m", "M", "-b", "hf", "-q", EXAMPLES / "ticket_questions.yaml"],
         "is the input file", same),
        (["validate", EXAMPLES / "tickets.jsonl", "-q", qdup], "duplicate key 'a'", None),
        (["run", EXAMPLES / "tickets.jsonl", "-o", tmp_path / "o.parquet", "-m", "M", "-b", "hf", "-q", qtop],
         "questions.extra_top: Input should be a question object", None),
        (["run", EXAMPLES / "tickets.jsonl", "-o", tmp_path / "o.parquet", "-m", "M", "-b", "hf", "--dry-run",
          "--resume"], "drop --resume", None),
    ]  # fmt: skip
    for args, msg, untouched in cases:
        before = untouched.read_bytes() if untouched else None
        r = cli(*map(str, args))
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        assert msg in " ".join((r.stdout + r.stderr).split()), r.stdout + r.stderr
        assert "_Question" not in r.stderr
        if untouched:
            assert untouched.read_bytes() == before


@pytest.mark.parametrize("command", ["run", "validate", "eval", "classify"])
def test_readme_cli_reference_names_every_option(command):
    """The README's CLI reference stays in step with --help: every option of each command is in it."""
    import re

    r = cli(command, "--help")
    assert r.returncode == 0
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", r.stdout)) - {"--help"}
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert options and not sorted(o for o in options if o not in readme)


def test_hf_refuses_sglang_engine_options(tiny_model, tmp_path):
    """`--tp-size 2 -b hf` used to run on one device without a word."""
    out = tmp_path / "o.parquet"
    inp = EXAMPLES / "tickets_inline.jsonl"
    r = cli("run", inp, "-m", tiny_model, "-b", "hf", "-o", out, "--tp-size", "2", "--no-progress")
    assert r.returncode == 4, r.stderr
    assert "error: the hf backend does not read --tp-size (sglang only); drop it" in r.stderr, r.stderr
    assert not out.exists()
    # refused when the options are validated, before any model (or Ray cluster) starts
    from openjev_batch.config import build_config
    from openjev_batch.errors import ConfigError

    with pytest.raises(ConfigError, match=r"does not read --engine-arg chunked_prefill_size \(sglang only\)"):
        build_config(input=inp, output=out, model="m", backend="hf", engine_args={"chunked_prefill_size": 1})


def test_sglang_refuses_hf_options(tiny_classifier, tmp_path):
    """`classify -b sglang --batch-tokens 5` used to drop the option without a word (only the hf classifier
    reads it): refused in one line, exit 4, before any engine starts; the default is no refusal."""
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "text": "fine"}])
    out = tmp_path / "o.parquet"
    r = cli(
        "classify",
        inp,
        "-m",
        tiny_classifier,
        "-b",
        "sglang",
        "-o",
        out,
        "--batch-tokens",
        "5",
        "--no-progress",
    )
    assert r.returncode == 4, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert line == "error: the sglang backend does not read --batch-tokens (hf only); drop it", r.stderr
    assert not out.exists() and not (tmp_path / "o.parquet.partial").exists()
    from openjev_batch.config import build_config
    from openjev_batch.errors import ConfigError

    base = dict(input=inp, output=out, model="m", readout="classifier-head")
    with pytest.raises(ConfigError, match="sglang backend does not read --batch-tokens"):
        build_config(**base, backend="sglang", batch_tokens=5)
    assert build_config(**base, backend="sglang", batch_tokens=None).sglang.tp_size == 1  # the default
    assert build_config(**base, backend="hf", batch_tokens=5).hf.batch_tokens == 5


def test_refusals_found_by_a_hostile_input_trial(tmp_path):
    """Each used to pass or to read badly: a dry run took any --dtype / --device (a real run refused them);
    a YAML questions file holding a plain string got a JSON parser's message; a stdin parse error named the
    temporary spool file instead of `-`. Each is now exit 4, one message, no traceback."""
    import subprocess
    import sys

    from conftest import ROOT

    text_q = tmp_path / "q.yaml"
    text_q.write_text("just a sentence, not a question map\n")
    dry = ["run", EXAMPLES / "tickets.jsonl", "-m", "M", "-b", "hf", "--dry-run", "-q", EXAMPLES / "ticket_questions.yaml"]  # fmt: skip
    cases = [
        ([*dry, "--dtype", "int8"], "dtype: unknown dtype 'int8'; expected one of auto, float32, bfloat16, float16"),
        ([*dry, "--device", "tpu"], "device: unknown device 'tpu'; expected one of auto, cpu, cuda, cuda:N"),
        ([*dry, "-b", "sglang", "--dtype", "int8"], "unknown dtype 'int8'"),
        (["validate", EXAMPLES / "tickets.jsonl", "-q", text_q],
         "the YAML/JSON questions file must be a mapping question_id → question, got a str"),
    ]  # fmt: skip
    for args, msg in cases:
        r = cli(*map(str, args))
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("error:") == 1 and msg in " ".join(r.stderr.split()), r.stderr
        assert "Expecting value" not in r.stderr
    cmd = [sys.executable, "-m", "openjev_batch", "run", "-", "-o", str(tmp_path / "o.parquet"), "-m", "M", "-b",
           "hf", "--dry-run", "-q", str(EXAMPLES / "ticket_questions.yaml")]  # fmt: skip
    r = subprocess.run(cmd, input="not json, not csv", capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 4 and "error: -: no rows" in r.stderr, r.stderr  # a CSV header, no rows
    assert "openjev-stdin-" not in r.stderr and "stdin.csv" not in r.stderr


def test_stdin_stdout_and_tsv_formats(tiny_model, tmp_path):
    """Issue 26: `-o -` writes JSONL on stdout (the summary stays on stderr), `/dev/stdin` is read as `-`,
    a .tsv input is read and a .tsv / .json output written; all give the same answers as a Parquet run."""
    import subprocess
    import sys

    from conftest import ROOT

    src = EXAMPLES / "sst2_sample.jsonl"
    q = EXAMPLES / "sst2_questions.yaml"
    base = ["-m", tiny_model, "-b", "hf", "-q", q, "--no-progress"]
    ref = cli("run", src, "-o", tmp_path / "ref.parquet", *base)
    assert ref.returncode == 0, ref.stderr
    want = pl.read_parquet(tmp_path / "ref.parquet").select("id", "question_id", "probs")

    args = [sys.executable, "-m", "openjev_batch", "run", "/dev/stdin", "-o", "-", *map(str, base)]
    with open(src, "rb") as f:
        p = subprocess.run(args, stdin=f, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr
    got = pl.DataFrame([json.loads(x) for x in p.stdout.splitlines()])  # every stdout line is a row
    assert got.select(want.columns).equals(want) and "questions" in p.stderr  # the summary: stderr
    # its output row names standard output, not the temporary file the rows were joined in (gone by then)
    assert "standard output (-o -)" in p.stderr and "openjev-stdout-" not in p.stderr, p.stderr

    rows = [json.loads(x) for x in src.read_text().splitlines()]
    tsv = tmp_path / "in.tsv"
    tsv.write_text("id\tstate\n" + "".join(f"{r['id']}\t{r['state']}\n" for r in rows), encoding="utf-8")
    r = cli("run", tsv, "-o", tmp_path / "out.tsv", *base)
    assert r.returncode == 0, r.stderr
    out = pl.read_csv(tmp_path / "out.tsv", separator="\t")
    assert out["id"].to_list() == want["id"].to_list()
    assert [json.loads(x) for x in out["probs"]] == want["probs"].to_list()
    r = cli("run", src, "-o", tmp_path / "out.json", *base)
    assert r.returncode == 0, r.stderr
    assert [x["probs"] for x in json.loads((tmp_path / "out.json").read_text())] == want["probs"].to_list()
    refused = cli("run", src, "-o", "-", "--resume", *base)
    assert refused.returncode == 4 and "standard output cannot be continued" in refused.stderr


def test_tokenizer_only_entries_refused_at_once_and_listed_by_kind(tmp_path):
    """Issue 26: `run -m qwen3-tokenizer` failed after 9 s with transformers' "Unrecognized model"; it is
    refused before anything loads, and `models list` says which entries are tokenizers only."""
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-o",
            tmp_path / "o.parquet", "-m", "qwen3-tokenizer", "-b", "hf")  # fmt: skip
    assert r.returncode == 4 and "is a tokenizer only (no weights)" in r.stderr, r.stderr
    assert (
        "smollm2-135m" in r.stderr
        and "Unrecognized" not in r.stderr
        and not (tmp_path / "o.parquet").exists()
    )
    # what needs only the tokenizer still takes it
    shown = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m",
                "qwen3-tokenizer", "--show-prompt", "1")  # fmt: skip
    assert shown.returncode == 0 and "═══ row" in shown.stdout, shown.stderr
    listed = cli("models", "list")
    assert listed.returncode == 0 and "kind" in listed.stdout
    lines = {ln.split("│")[1].strip(): ln for ln in listed.stdout.splitlines() if ln.count("│") > 3}
    assert "tokenizer only" in lines["qwen3-tokenizer"] and "tokenizer only" not in lines["smollm2-135m"]


def test_validate_into_a_closed_pipe_exits_0(tmp_path):
    """`validate … 2>&1 | head` exited 1 (rich's broken-pipe exit): a reader that stops early is no error."""
    import subprocess
    import sys

    from conftest import ROOT

    bad = write_jsonl(tmp_path / "bad.jsonl", [
        {"id": f"r{i}", "state": "x", "questions": {"q": {"type": "choice", "instructions": "?", "criteria": {}}}}
        for i in range(3000)
    ])  # fmt: skip
    p = subprocess.Popen([sys.executable, "-m", "openjev_batch", "validate", str(bad), "--show", "3000"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    first = p.stdout.readline()
    p.stdout.close()  # as `head -1` does
    assert p.wait(timeout=120) == 0 and b"row r0" in first


def test_run_summary_shows_the_thread_count(tiny_model, tmp_path):
    """Issue 26: the summary did not show the thread count the default picked."""
    import os
    import re

    r = cli("run", EXAMPLES / "sst2_sample.jsonl", "-q", EXAMPLES / "sst2_questions.yaml", "--limit", "2",
            "-o", tmp_path / "o.parquet", "-m", tiny_model, "-b", "hf", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    how = "OMP_NUM_THREADS" if os.environ.get("OMP_NUM_THREADS") else "default: the idle cores"
    assert re.search(rf"CPU threads\W+\d+ \({how}\)", r.stderr), r.stderr


_NO_TORCH = """
import sys
from openjev_batch.cli import app
try:
    app(sys.argv[1:], prog_name="openjev-batch")
except SystemExit as e:
    print("exit", e.code, "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    "args,message",
    [
        (["/nope/missing.jsonl", "-o", "{tmp}/o.parquet"], "/nope/missing.jsonl: no such file"),
        (["{tickets}", "-o", "/nope/folder/o.parquet"], "folder /nope/folder does not exist"),
        (["{tickets}", "-o", "{tmp}/o.xlsx"], "o.xlsx"),
        (["{tickets}", "-o", "{tmp}/o.parquet", "-b", "vllm"], "unknown backend 'vllm'"),
    ],
)
def test_a_wrong_path_or_name_is_refused_before_torch_is_imported(tmp_path, args, message):
    """Issue 34.5: a wrong -o folder, extension or backend took 6-12 s, a missing input 7.9 s (validate:
    1.8 s): torch was imported (--threads, the default backend) before the names were checked."""
    import subprocess
    import sys

    from conftest import ROOT

    args = [a.format(tmp=tmp_path, tickets=EXAMPLES / "tickets.jsonl") for a in args]
    cmd = [sys.executable, "-c", _NO_TORCH, "run", *args, "-q", EXAMPLES / "ticket_questions.yaml",
           "-m", "smollm2-135m"]  # fmt: skip
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.stdout.split() == ["exit", "4", "False"], (r.stdout, r.stderr)
    assert message in " ".join(r.stderr.split()), r.stderr


def test_top_level_help_names_each_command_in_whole_phrases():
    """Issue 34.11: `openjev-batch -h` cut each command's line mid-phrase ("from the model's...")."""
    r = cli("-h")
    commands = r.stdout[r.stdout.index("Commands:") :].splitlines()[1:]
    assert r.returncode == 0 and len([c for c in commands if c.strip()]) == 8, r.stdout  # compare (issue 50) joined the seven
    assert not [c for c in commands if c.rstrip().endswith("...")], r.stdout


@pytest.mark.parametrize("flag", ["--limit", "--chunk-rows"])
def test_an_out_of_range_number_is_one_kind_of_error(flag, tmp_path):
    """Issue 34.11: `--limit 0` was a usage error (exit 2, `Error:`), `--chunk-rows 0` a bad option (exit 4,
    `error:`); both are now exit 4 with the config's one-line message."""
    r = cli("run", EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml", "-m", "smollm2-135m",
            "-o", tmp_path / "o.parquet", flag, "0")  # fmt: skip
    assert r.returncode == 4 and r.stderr.startswith("error: invalid options: "), r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--bogus"], "error: No such option: --bogus"),
        (["run"], "error: Missing argument 'input'."),
        (["run", "x.jsonl", "--chunk-rows", "many"], "error: Invalid value for '--chunk-rows': "),
        (["nosuchcommand"], "error: No such command 'nosuchcommand'."),
        (["run", "--b\x1b[2Jx"], "error: No such option: --b\\x1b[2Jx"),  # the user's text, escaped
    ],
)
def test_a_usage_error_begins_error_as_ours_do(args, message):
    """Issue 34.11: click's usage errors began `Error:`, ours `error:`; every error line now begins `error:`
    and a usage error keeps exit 2 and click's usage and help lines."""
    r = cli(*args)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and lines[0].startswith("Usage: ") and "-h' for help." in lines[1], r.stderr
    assert lines[-1].startswith(message) and "Error:" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_console_script_shows_usage_errors_as_the_module_does():
    """`openjev-batch` (pyproject: `openjev_batch.cli:app`) calls the app itself, not `cli.main`."""
    code = "import sys; from openjev_batch.cli import app; sys.argv[0] = 'openjev-batch'; app()"
    r = subprocess.run([sys.executable, "-c", code, "run", "--bogus"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.splitlines()[-1] == "error: No such option: --bogus", r.stderr
    ok = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.startswith("openjev-batch "), ok.stderr


def test_help_texts_say_what_each_command_takes():
    """Issue 48.15: metavars read `<list[str]>` and usage lines `{input}`; serve's `--config` help offered
    `chunk-rows` and `input`, which serve refuses; run's `--limit` spoke of eval; `--holdout` and eval's
    `--calibrate` showed no range; the README's `--sglang-patches` left out `with-alloc`."""
    raw = {c: cli(c, "--help").stdout for c in ("run", "serve", "calibrate", "eval")}
    helps = {c: " ".join(text.split()) for c, text in raw.items()}
    for command, text in raw.items():
        assert "list[str]" not in text and "{" not in text.splitlines()[0], (command, text)
    assert "run [OPTIONS] INPUT" in helps["run"] and "calibrate [OPTIONS] LABELLED" in helps["calibrate"]
    assert "--engine-arg KEY=VALUE" in helps["run"] and "--question ID" in helps["calibrate"]
    config = helps["serve"].split("--config <file>")[1][:120]
    assert "`port: 8000`, `model` too" in config and "chunk-rows" not in config, config
    assert "`chunk-rows: 512`, `input`" in helps["run"].split("--config <file>")[1][:120]
    limit = helps["run"].split("--limit <int>")[1][:80]
    assert "eval" not in limit and "lm-eval" in helps["eval"].split("--limit <int>")[1][:120], limit
    assert "(between 0 and 1, exclusive" in helps["calibrate"].split("--holdout")[1][:200]
    assert "(between 0 and 1, exclusive)" in helps["eval"].split("--calibrate <float>")[1][:120]
    from openjev_batch.options import ENGINE_OPTIONS

    (patches,) = [o for o in ENGINE_OPTIONS if o.name == "sglang_patches"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.lstrip().startswith("--sglang-patches TEXT")]
    for name in ("all", "with-alloc", "gather", "readback", "none"):
        assert name in line and name in str(patches), name


def test_a_run_leaves_no_torchinductor_folder_in_tmpdir(tiny_model, tmp_path):
    """Issue 48.9: every run left an empty `torchinductor_<user>/` in its TMPDIR (torch makes its compile cache
    folder when transformers imports torch._dynamo). It is made beside the packaged models' cache instead."""
    import os

    tmp, cache = tmp_path / "tmp", tmp_path / "cache"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "OPENJEV_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-m", "openjev_batch", "run", EXAMPLES / "tickets.jsonl", "-q",
                        EXAMPLES / "ticket_questions.yaml", "-m", tiny_model, "-b", "hf", "--dry-run"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert list(tmp.iterdir()) == []
    # whether a run makes the folder at all depends on the transformers release (5.12 imports torch._dynamo on
    # this path, 5.25 does not: CI's plain install); where torch makes it is asked of torch itself
    where = subprocess.run([sys.executable, "-c", "import openjev_batch.cli\n"
                            "from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()) == cache / "torchinductor" and (cache / "torchinductor").is_dir()
    assert list(tmp.iterdir()) == []
    # issue 48.12: --dry-run said nothing until its table (51-157 s at load): its first line says what it does
    assert r.stderr.splitlines()[0].startswith(
        f"--dry-run: planning every row of {EXAMPLES / 'tickets.jsonl'} with the model's tokenizer alone (no "
        "weights load, nothing is written)"
    ), r.stderr
