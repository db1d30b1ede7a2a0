"""The real command: every command that runs a job (`run`, `classify`, `eval`) takes `--limit`, `--threads` and
`--dry-run` with the same defaults; `--dry-run` needs no -o for any of them, and `--dry-run --ray` is refused
rather than planned as if `--ray` were not there."""

from __future__ import annotations

import re

import polars as pl
from conftest import EXAMPLES, ROOT, cli

TICKETS = [EXAMPLES / "tickets.jsonl", "-q", EXAMPLES / "ticket_questions.yaml"]
RTE = EXAMPLES / "nli" / "rte_sample.jsonl"
MMLU_PRO = ROOT / "evals" / "fixtures" / "mmlu_pro_test.jsonl"


def plan_rows(stdout: str) -> dict[str, str]:
    """The `key │ value` rows of the dry-run table."""
    cells = (re.split(r"│", line) for line in stdout.splitlines())
    return {c[1].strip(): c[2].strip() for c in cells if len(c) == 4}


def test_every_job_command_declares_the_same_three_options():
    for command in ("run", "classify", "eval"):
        r = cli(command, "--help")
        assert r.returncode == 0, r.stderr
        text = " ".join(r.stdout.split())
        for flag in ("--limit", "--threads", "--dry-run"):
            assert flag in text, (command, flag)
        # one declaration: the same help (eval's --limit had its own, classify had none)
        assert "Only the first N input rows" in text and "Plan only (tokenizer, no model, no -o)" in text


def test_dry_run_needs_no_output_for_run_classify_and_eval(tiny_model, tiny_classifier, tmp_path):
    run = cli("run", *TICKETS, "-m", tiny_model, "-b", "hf", "--dry-run", "--limit", "5", "--threads", "1")
    assert run.returncode == 0, run.stderr
    got = plan_rows(run.stdout)
    assert "openjev-batch run --dry-run" in run.stdout
    assert (got["rows"], got["questions"], got["row/question errors"], got["branches"]) == (
        "5",
        "15",
        "0",
        "15",
    )

    classify = cli("classify", RTE, "-m", tiny_classifier, "-b", "hf", "--dry-run", "--limit", "3")
    assert classify.returncode == 0, classify.stderr
    got = plan_rows(classify.stdout)
    assert "openjev-batch classify --dry-run" in classify.stdout and "SequenceClassification" in got["model"]
    assert (got["rows"], got["questions"], got["branches"]) == ("3", "3", "3")

    before = sorted(p.name for p in ROOT.iterdir())
    ev = cli("eval", MMLU_PRO, "-m", tiny_model, "-b", "hf", "--dry-run", "--limit", "4", "--no-progress")
    assert ev.returncode == 0, ev.stderr
    got = plan_rows(ev.stdout)
    assert "openjev-batch eval --dry-run" in ev.stdout
    assert (got["rows"], got["questions"], got["branches"]) == ("4", "4", "4")
    assert (
        sorted(p.name for p in ROOT.iterdir()) == before
    )  # no questions.jsonl or report in the default -o .


def test_dry_run_refuses_ray_and_resume_in_one_line(tmp_path):
    for args in (
        ["run", *TICKETS, "-m", "M", "-b", "hf", "--dry-run", "--ray"],
        ["classify", RTE, "-m", "M", "-b", "hf", "--dry-run", "--ray", "--workers", "2"],
    ):
        r = cli(*args)
        assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("error:") == 1 and "not per Ray bucket: drop --ray" in " ".join(
            r.stderr.split()
        )
    r = cli("eval", MMLU_PRO, "-m", "M", "-b", "hf", "--dry-run", "--resume", "-o", tmp_path / "ev")
    assert r.returncode == 4 and "drop --show-prompt/--resume" in " ".join(r.stderr.split()), r.stderr
    assert not (tmp_path / "ev").exists()
    # without --dry-run, classify still needs its -o
    r = cli("classify", RTE, "-m", "M", "-b", "hf")
    assert r.returncode == 2 and "only --dry-run run without it" in " ".join(r.stderr.split()), r.stderr


def test_classify_takes_limit_and_threads(tiny_classifier, tmp_path):
    out = tmp_path / "o.parquet"
    r = cli("classify", RTE, "-m", tiny_classifier, "-b", "hf", "-o", out, "--limit", "2", "--threads", "1",
            "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    df = pl.read_parquet(out)
    assert df["id"].to_list() == ["rte-val-000", "rte-val-001"] and df["error"].null_count() == 2
    assert re.search(r"CPU threads\s*│\s*1 \(--threads\)", r.stderr), r.stderr
