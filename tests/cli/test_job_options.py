"""The real command: every command that runs a job (`run`, `classify`, `eval`) takes `--limit`, `--threads` and
`--dry-run` with the same defaults; `--dry-run` needs no -o for any of them, and `--dry-run --ray` is refused
rather than planned as if `--ray` were not there."""

from __future__ import annotations

import re

import polars as pl
import pytest
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
        # one declaration (eval's --limit had its own, classify had none), whose help names what each command
        # counts: eval's --limit counts questions (issue 48.15: run's help spoke of eval)
        limit = "Only the first N questions, after --sample" if command == "eval" else "Only the first N input rows"
        assert limit in text and "Plan only (tokenizer, no model, no -o)" in text, command


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


# Issue 31.3: the job options are declared once (openjev_batch/job_options.py); the flags of run, classify,
# eval and validate are generated from that data, and the configs (RunConfig, EvalConfig) and the Python API
# read the same defaults.
COMMANDS = ("run", "classify", "eval", "validate")


def _params(command: str) -> dict:
    import typer.main

    from openjev_batch.cli import app

    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def test_every_job_flag_is_its_one_declaration():
    """Each command that takes a job option has its flag, help and default from JOB_OPTIONS (`--chunk-rows`:
    the command's readout's, eval's the config's to fill in); no other command has it."""
    from openjev_batch.job_options import JOB_OPTIONS
    from openjev_batch.readouts import readout_class

    own = {"run": readout_class("label-logprobs"), "classify": readout_class("classifier-head")}
    for o in JOB_OPTIONS:
        for command in COMMANDS:
            params = _params(command)
            if command not in o.commands:
                assert o.name not in params, (command, o.name)
                continue
            p = params[o.name]
            assert o.cli_flag.split("/")[0] in p.opts and p.help == o.help_for(command), (command, o.name)
            want = (getattr(own[command], o.name) if command in own else None) if o.per_readout else o.default
            assert p.default == want, (command, o.name, p.default, want)


def test_the_configs_embed_the_job_options_with_their_one_default():
    from openjev_batch.config import RunConfig
    from openjev_batch.evaluation.run import EvalConfig
    from openjev_batch.job_options import JOB_OPTIONS

    for o in (o for o in JOB_OPTIONS if o.config):
        assert RunConfig.model_fields[o.name].default == EvalConfig.model_fields[o.name].default == o.default
    # one name for the most-branches option
    names = {*RunConfig.model_fields, *EvalConfig.model_fields, *(p for c in COMMANDS for p in _params(c))}
    assert "max_branches" in names and not names & {"max_branches_per_window", "max_rows", "max_per_window"}


class _Built(Exception):
    pass


def _capture(monkeypatch) -> list[dict]:
    """build_config made to record the options it is given and stop the caller there (patched where each
    caller looks it up: the CLI imports it when it runs, the API when it loads)."""
    import openjev_batch.api as api
    import openjev_batch.config as config

    seen: list[dict] = []

    def record(**kw):
        seen.append(kw)
        raise _Built

    monkeypatch.setattr(config, "build_config", record)
    monkeypatch.setattr(api, "build_config", record)
    return seen


@pytest.mark.parametrize("command, readout", [("run", "label-logprobs"), ("classify", "classifier-head")])
def test_the_api_defaults_are_the_clis(monkeypatch, tmp_path, command, readout):
    """The config the CLI builds from a command given no options equals the one the Python API builds from a
    Classifier given none (but `progress`: the API draws no bar)."""
    from typer.testing import CliRunner

    import openjev_batch as ob
    from openjev_batch.cli import app
    from openjev_batch.config import build_config

    seen = _capture(monkeypatch)
    r = CliRunner().invoke(
        app, [command, str(TICKETS[0]), "-m", "org/model", "-b", "hf", "-o", str(tmp_path / "o.parquet")]
    )
    assert isinstance(r.exception, _Built), r.output
    with pytest.raises(_Built):
        ob.Classifier("org/model", "hf", readout=readout)
    monkeypatch.undo()
    cli_cfg, api_cfg = (build_config(**kw).model_dump() for kw in seen)
    for k in ("input", "output", "model", "progress"):
        cli_cfg.pop(k), api_cfg.pop(k)
    assert cli_cfg == api_cfg
