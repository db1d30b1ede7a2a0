"""`--config job.yaml` (cli/jobfile.py): a nightly job as data. The file's options are the command's
defaults, flags override them, and a key the command does not take is refused, naming what it takes."""

import polars as pl
from conftest import cli, write_jsonl

ROWS = [
    {"id": "a", "state": "my card was charged twice, refund please"},
    {"id": "b", "state": "love the app"},
    {"id": "c", "state": "where is my parcel"},
]


def _job(tmp_path, tiny_model, **extra):
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    (tmp_path / "q.yaml").write_text("u:\n  type: noul\n  instructions: Is it urgent?\n")
    lines = [
        f"input: {tmp_path / 'in.jsonl'}",
        f"model: {tiny_model}",
        "backend: hf",
        f"questions: {tmp_path / 'q.yaml'}",
        "chunk-rows: 2",
        "progress: false",
        *(f"{k}: {v}" for k, v in extra.items()),
    ]
    job = tmp_path / "job.yaml"
    job.write_text("\n".join(lines) + "\n")
    return job


def test_a_job_file_runs_the_job_and_flags_override_it(tmp_path, tiny_model):
    job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet")
    r = cli("run", "--config", job)
    assert r.returncode == 0, r.stderr
    a = pl.read_parquet(tmp_path / "o.parquet")  # input, model and questions all came from the file
    assert a["id"].to_list() == ["a", "b", "c"] and a["question_id"].to_list() == ["u"] * 3
    assert a["error"].is_null().all() and all(abs(sum(p) - 1) < 1e-6 for p in a["probs"].to_list())
    # a flag given on the command line wins over the file's value
    r = cli("run", "--config", job, "-o", tmp_path / "two.jsonl", "--limit", "2")
    assert r.returncode == 0, r.stderr
    assert pl.read_ndjson(tmp_path / "two.jsonl")["id"].to_list() == ["a", "b"]


def test_an_unknown_or_repeated_key_in_a_job_file_is_refused_before_the_model_loads(tmp_path, tiny_model):
    job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet", chunk_row=5)
    r = cli("run", "--config", job)
    assert r.returncode == 4 and not (tmp_path / "o.parquet").exists(), r.stderr
    assert "unknown option 'chunk_row' for run; it takes:" in r.stderr and "chunk-rows" in r.stderr, r.stderr
    twice = _job(tmp_path, tiny_model, chunk_rows=3)  # `chunk-rows` and `chunk_rows` name one option
    r = cli("run", "--config", twice, "-o", tmp_path / "o.parquet")
    assert r.returncode == 4 and "option 'chunk-rows' is given twice" in r.stderr, r.stderr
    (tmp_path / "list.yaml").write_text("- input\n- model\n")
    r = cli("run", "--config", tmp_path / "list.yaml")
    assert r.returncode == 4 and "must be a mapping of option names to values, got a list" in r.stderr
    r = cli("classify", "--config", tmp_path / "missing.yaml")
    assert r.returncode != 0 and "missing.yaml" in r.stderr


def test_a_bool_or_a_fraction_for_an_integer_option_is_refused(tmp_path, tiny_model):
    """click turned `debias-order: true` into K = 1: no debiasing, exit 0, silently (hostile trial)."""
    for key, value, shown in (("debias-order", "true", "True"), ("threads", "1.5", "1.5")):
        job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet", **{key: value})
        r = cli("run", "--config", job)
        assert r.returncode == 4 and not (tmp_path / "o.parquet").exists(), r.stderr
        assert f"{key}: expected an integer, got {shown}" in r.stderr, r.stderr
    job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet", **{"debias-order": "'1'"})  # text: as a flag
    assert cli("run", "--config", job, "--dry-run").returncode == 0


def test_a_list_or_a_boolean_for_a_text_option_is_refused(tmp_path, tiny_model):
    """Attack trial (issue 42): `system-prompt: [Be brief, Be kind]` gave the system message
    "['Be brief', 'Be kind']" (a list's Python repr), `keep: [tag]` was refused as a missing column "['tag']",
    `questions: [q.yaml]` named `<class 'pathlib.Path'>`. A one-value option takes one value, as its flag."""
    cases = (
        ("system-prompt", "[Be brief, Be kind]", "system-prompt: expected one value, got a list"),
        ("keep", "[tag]", "keep: expected comma-separated column names as one text (`keep: tag` or"),
        ("questions", "[q.yaml]", "questions: expected one value, got a list"),
        ("system-prompt", "{a: 1}", "system-prompt: expected one value, got a mapping"),
        ("system-prompt", "yes", "system-prompt: expected text, got true (quote it for text)"),
    )
    for key, value, shown in cases:
        job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet", **{key: value})
        if key == "questions":  # the file's own questions line goes: the key is given once
            job.write_text(job.read_text().replace(f"questions: {tmp_path / 'q.yaml'}\n", "", 1))
        r = cli("run", "--config", job)
        assert r.returncode == 4 and not (tmp_path / "o.parquet").exists(), (key, r.stderr)
        assert shown in " ".join(r.stderr.split()) and "class '" not in r.stderr, (key, r.stderr)
    job = _job(tmp_path, tiny_model, **{"system-prompt": "'yes'"})  # quoted: the text "yes"
    assert cli("run", "--config", job, "--dry-run").returncode == 0


def test_a_wrong_type_for_a_number_or_a_flag_names_the_file_with_exit_4(tmp_path, tiny_model):
    """Hostile trial: `chunk-rows: abc` or `progress: 7` was click's usage error (exit 2) naming `--chunk-rows`,
    while a list for the same key named the file (exit 4). Each is now the file's error, exit 4."""
    cases = (
        ("threads", "abc", "threads: expected an integer, got 'abc'"),
        ("resume", "7", "resume: expected true or false, got 7"),
        ("mem-fraction-static", "lots", "mem-fraction-static: expected a number, got 'lots'"),
        ("gpus-per-worker", "true", "gpus-per-worker: expected a number, got true"),
    )
    for key, value, shown in cases:
        job = _job(tmp_path, tiny_model, output=tmp_path / "o.parquet", **{key: value})
        r = cli("run", "--config", job)
        assert r.returncode == 4 and not (tmp_path / "o.parquet").exists(), (key, r.stderr)
        assert f"--config {job}: {shown}" in " ".join(r.stderr.split()), (key, r.stderr)
    # what a flag's own text takes still goes: `resume: "no"`, a number as text
    job = _job(tmp_path, tiny_model, resume="'no'", threads="'2'")
    r = cli("run", "--config", job, "--dry-run")
    assert r.returncode == 0, r.stderr
    # a number as text reaches the option's own check (hf takes no --mem-fraction-static), not the file's
    job = _job(tmp_path, tiny_model, **{"mem-fraction-static": "'0.5'"})
    r = cli("run", "--config", job, "--dry-run")
    assert r.returncode == 4 and "does not read --mem-fraction-static" in r.stderr, r.stderr


def test_one_value_of_a_repeatable_option_is_taken_as_its_flag_takes_one(tmp_path, tiny_model):
    """Hostile trial: `engine-arg: "chunked_prefill_size=8192"` (one text, not a mapping or a list) was click's
    "Value must be an iterable" (exit 2); it is the one value `--engine-arg` takes, and reaches the option's
    own check (hf reads no sglang engine arg)."""
    job = _job(tmp_path, tiny_model, **{"engine-arg": '"chunked_prefill_size=8192"'})
    r = cli("run", "--config", job, "--dry-run")
    assert r.returncode == 4 and "does not read --engine-arg chunked_prefill_size" in r.stderr, r.stderr


def test_a_value_its_option_refuses_names_the_file_with_exit_4(tmp_path, tiny_model):
    """Hostile trial: `threads: 0` or `show-prompt: 0` in a job file was click's usage error naming the flag
    (exit 2), though the value came from the file; on the command line it stays the usage error."""
    for key in ("threads", "show-prompt"):
        job = _job(tmp_path, tiny_model, **{key: 0})
        r = cli("run", "--config", job)
        assert r.returncode == 4, (key, r.stderr)
        assert r.stderr.strip().splitlines() == [
            f"error: --config {job}: {key}: Input should be greater than or equal to 1"
        ], r.stderr
    r = cli("run", "--config", job, "--threads", "0")
    assert r.returncode == 2 and "Invalid value for '--threads'" in r.stderr, r.stderr
