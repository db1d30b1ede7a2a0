"""The readout registry (readouts/__init__.py) is the one place that names readouts: each declares the job
options it reads (its `Options` type), and the config refuses another readout's, naming the command it
belongs to. A third readout is its own module (a class decorated `@register`) plus one `READOUTS.lazy` line."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_batch import config, readouts
from openjev_batch.config import build_config
from openjev_batch.errors import ConfigError


def _cfg(**kw):
    return build_config(input=Path("-"), model="", backend="hf", **kw)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        (
            {"readout": "classifier-head", "questions": Path("q.yaml")},
            "--questions is for run (label-logprobs)",
        ),
        ({"readout": "classifier-head", "system_prompt": "x"}, "--system-prompt is for run (label-logprobs)"),
        # issue 32's options, declared once in LabelLogprobsOptions, are refused the same way
        ({"readout": "classifier-head", "calibration": Path("c.json")}, "--calibration is for run (label-logprobs)"),
        ({"readout": "classifier-head", "debias_order": 2}, "--debias-order is for run (label-logprobs)"),
        ({"template": "{premise} / {hypothesis}"}, "--template is for classify (classifier-head)"),
    ],
)
def test_an_option_of_another_readout_is_refused_naming_its_command(kw, why):
    with pytest.raises(ConfigError, match=re.escape(f"invalid options: {why}, not for")):
        _cfg(**kw)


def test_a_third_readout_is_its_module_and_one_registry_line(tmp_path, monkeypatch):
    # the class registers itself and owns its options, columns, command and default chunk size
    (tmp_path / "echo_readout.py").write_text(
        "from openjev_batch.readouts import register\n"
        "from openjev_batch.readouts.base import ReadoutOptions\n"
        "from openjev_batch.readouts.label_logprobs import LabelLogprobs\n"
        "class EchoOptions(ReadoutOptions):\n"
        '    echo_prefix: str = ">"\n'
        '@register("echo")\n'
        "class Echo(LabelLogprobs):\n"
        '    command = "echo"\n'
        "    Options = EchoOptions\n"
        '    input_columns = ("id", "text")\n'
        '    base_columns = ("id", "echo", "error")\n'
        '    text_column = "text"\n'
        "    chunk_rows = 7\n"
        "    @classmethod\n"
        "    def from_config(cls, cfg, labels=None):\n"
        "        return (cfg.readout_options.echo_prefix, cfg.keep)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(readouts.READOUTS, "_items", dict(readouts.READOUTS._items))
    readouts.READOUTS.lazy("echo", "echo_readout:Echo")
    monkeypatch.setattr(readouts, "NAMES", (*readouts.NAMES, "echo"))
    monkeypatch.setattr(config, "NAMES", readouts.NAMES)  # RunConfig checks the readout's name against it
    cfg = _cfg(readout="echo", keep=("channel",), echo_prefix="»")
    assert readouts.build("echo", cfg) == ("»", ("channel",))
    assert cfg.chunk_rows == 7  # the readout's default
    assert readouts.text_column("echo") == "text" and readouts.base_columns("echo") == ("id", "echo", "error")
    with pytest.raises(
        ConfigError, match=r"--questions is for run \(label-logprobs\), not for echo \(echo\)"
    ):
        _cfg(readout="echo", questions=Path("q.yaml"))
    with pytest.raises(
        ConfigError, match=r"--echo-prefix is for echo \(echo\), not for run \(label-logprobs\)"
    ):
        _cfg(echo_prefix="»")
    with pytest.raises(ConfigError, match="keep: --keep column.s. echo clash with output columns"):
        _cfg(readout="echo", keep=("echo",))
    sys.modules.pop("echo_readout", None)


def test_each_readout_declares_its_options_once_with_their_defaults():
    # the job's chunk size and the readout's own options come from the readout when not given (the CLI,
    # the API and eval agree: issue 31)
    run, classify = _cfg(), _cfg(readout="classifier-head")
    assert run.chunk_rows == readouts.readout_class("label-logprobs").chunk_rows == 2048
    assert classify.chunk_rows == readouts.readout_class("classifier-head").chunk_rows == 20_000
    assert run.readout_options.questions is None and run.readout_options.system_prompt is None
    assert run.readout_options.calibration is None and run.readout_options.debias_order == 1
    # not given (None: the API's default) is the Options' default, for any readout
    assert _cfg(debias_order=None).readout_options.debias_order == 1
    assert _cfg(readout="classifier-head", debias_order=None, calibration=None).readout == "classifier-head"
    with pytest.raises(ConfigError, match="debias_order"):
        _cfg(debias_order=65)
    assert classify.readout_options.template == "Premise: {premise}\nHypothesis: {hypothesis}"
    assert _cfg(chunk_rows=5).chunk_rows == 5
    with pytest.raises(ConfigError, match="invalid options: system_prompt: --system-prompt is empty"):
        _cfg(system_prompt=" ")
    with pytest.raises(ConfigError, match="Extra inputs are not permitted"):  # no readout declares it
        _cfg(questions_file=Path("q.yaml"))


ECHO = '''
from typing import Annotated
from pydantic import Field
from openjev_batch.readouts import register
from openjev_batch.readouts.flags import Flag
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.readouts.label_logprobs.options import LabelLogprobsOptions

class EchoOptions(LabelLogprobsOptions):
    echo_voice: Annotated[str | None, Flag("Answer in this voice (the system prompt).", also=("run",))] = None
    echo_depth: Annotated[int, Flag("How deep the echo goes.", also=("run",))] = Field(2, ge=1, le=9)

@register("echo")
class Echo(LabelLogprobs):
    command = "echo"
    Options = EchoOptions

    @classmethod
    def from_config(cls, cfg, labels=None):
        opts = cfg.readout_options
        voice = cfg.model_copy(update={"readout_options": opts.model_copy(update={"system_prompt": opts.echo_voice})})
        return super().from_config(voice, labels)
'''


def _register_echo(tmp_path, monkeypatch):
    (tmp_path / "echo_voice.py").write_text(ECHO)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(readouts.READOUTS, "_items", dict(readouts.READOUTS._items))
    readouts.READOUTS.lazy("echo", "echo_voice:Echo")
    monkeypatch.setattr(readouts, "NAMES", (*readouts.NAMES, "echo"))
    monkeypatch.setattr(config, "NAMES", readouts.NAMES)


def test_a_third_readouts_option_is_a_flag_with_its_declared_default_and_bounds(tmp_path):
    """Generated like the job options (cli/job_options.py): a readout registered before the CLI loads gets its
    options on the commands its `Flag`s name, with no edit to any command; its own command (one function that
    names its readout: `command("echo", JobOwn, JOB_LAYOUT)(_run_job)`) gets its options, every job command's
    engine and job options and its chunk size."""
    (tmp_path / "echo_voice.py").write_text(ECHO)
    script = (
        "import sys; from openjev_batch import config, readouts\n"
        "readouts.READOUTS.lazy('echo', 'echo_voice:Echo'); readouts.NAMES = config.NAMES = (*readouts.NAMES, 'echo')\n"
        "from openjev_batch.cli import app\n"
        "from openjev_batch.cli.door import command\n"
        "from openjev_batch.cli.run import JOB_LAYOUT, JobOwn, _run_job\n"
        "command('echo', JobOwn, JOB_LAYOUT)(_run_job)\n"
        "app([sys.argv[1], '--help'], prog_name='openjev-batch')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}  # fmt: skip
    helps = {}
    for command in ("run", "echo"):
        r = subprocess.run([sys.executable, "-c", script, command], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        helps[command] = " ".join(r.stdout.split())
    text = helps["run"]
    assert "--echo-voice <str> Answer in this voice (the system prompt)." in text
    assert "--echo-depth <int range> How deep the echo goes. [default: 2; 1<=x<=9]" in text
    assert "--debias-order" in text  # run's own stay
    echo = helps["echo"]
    assert "--echo-depth" in echo and "--debias-order" in echo and "-q, --questions" in echo  # all of its Options
    assert "--device" in echo and "--resume" in echo and "--chunk-rows <int>" in echo and "[default: 2048]" in echo


def test_a_third_readouts_option_is_a_python_api_keyword(tiny_model, tmp_path, monkeypatch):
    from openjev_batch import Classifier

    _register_echo(tmp_path, monkeypatch)
    q = {"u": {"type": "noul", "instructions": "Urgent?"}}
    with Classifier(tiny_model, "hf", device="cpu", readout="echo", echo_voice="Speak like a pirate.") as clf:
        assert "Speak like a pirate." in clf.show_prompt(["my invoice is wrong"], q)
        assert clf.run(["my invoice is wrong"], q, output="polars")["error"].to_list() == [None]
    with pytest.raises(ConfigError, match="echo_depth: Input should be less than or equal to 9"):
        Classifier(tiny_model, "hf", device="cpu", readout="echo", echo_depth=10)
    sys.modules.pop("echo_voice", None)


@pytest.mark.parametrize("flag", ["--debias-order", "--template", "--system-prompt", "--calibration"])
def test_a_readout_option_is_declared_once(flag):
    """Its default and bounds are written in one place, its readout's `Options` field; every command's flag,
    eval's field and the Python API's keyword come from there (no module writes the flag, eval's field is
    the same declaration, neither Classifier signature names it)."""
    from openjev_batch import Classifier
    from openjev_batch.evaluation.run import EvalConfig

    name = flag.removeprefix("--").replace("-", "_")
    pkg = Path(readouts.__file__).parent.parent
    by_hand = re.compile(rf"Option\(\s*[^()]{{0,200}}?[\"']{flag}[\"']")  # typer.Option(1, "--debias-order", …)
    assert [p.name for p in pkg.rglob("*.py") if by_hand.search(p.read_text())] == []
    (owner,) = [n for n in readouts.NAMES if name in readouts.readout_class(n).Options.model_fields]
    field = readouts.readout_class(owner).Options.model_fields[name]
    if name in EvalConfig.model_fields:
        same = EvalConfig.model_fields[name]
        assert (same.default, same.metadata) == (field.default, field.metadata)
    for fn in (Classifier.__init__, Classifier.run):
        assert name not in inspect.signature(fn).parameters


# the third readout's own command, as `classify` is written (cli/run.py: its options generated, its body the one
# job body), registered before the CLI loads; argv[1:] is the command line
ECHO_CLI = """
import sys

from openjev_batch import config, readouts

readouts.READOUTS.lazy("echo", "echo_voice:Echo")
readouts.NAMES = config.NAMES = (*readouts.NAMES, "echo")
from openjev_batch.cli import main
from openjev_batch.cli.door import command
from openjev_batch.cli.run import JOB_LAYOUT, JobOwn, _run_job

command("echo", JobOwn, JOB_LAYOUT)(_run_job)  # the command: run's own options, the echo readout's job

sys.argv = ["openjev-batch", *sys.argv[1:]]
main()
"""


def test_a_third_readout_runs_a_job_through_its_command_and_the_loop(tiny_model, tmp_path):
    """The third readout end to end: its module and its command, with no edit to the package, read a file
    through the job's loop on the tiny model and write every record; its own option reaches the prompt
    (`--echo-voice` is the system prompt): the numbers equal `run --system-prompt` with that text, and differ
    from `run` without it."""
    import pyarrow.parquet as pq
    from conftest import EXAMPLES, cli, write_jsonl

    (tmp_path / "echo_voice.py").write_text(ECHO)
    rows = [{"id": "a", "state": "my invoice is wrong"}, {"id": "b", "state": "the site is down, help"}]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    q = EXAMPLES / "ticket_questions.yaml"
    common = ["-q", q, "-m", tiny_model, "-b", "hf", "--device", "cpu", "--threads", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}  # fmt: skip
    voice = "Speak like a pirate."
    r = subprocess.run([sys.executable, "-c", ECHO_CLI, "echo", src, "-o", tmp_path / "echo.parquet",
                        "--echo-voice", voice, *map(str, common)],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    echo = pq.read_table(tmp_path / "echo.parquet").to_pylist()
    for name, extra in (("pirate", ["--system-prompt", voice]), ("plain", [])):
        r = cli("run", src, "-o", tmp_path / f"{name}.parquet", *common, *extra)
        assert r.returncode == 0, r.stderr
    pirate, plain = (pq.read_table(tmp_path / f"{n}.parquet").to_pylist() for n in ("pirate", "plain"))
    n_questions = len([k for k in pirate if k["id"] == "a"])
    assert len(echo) == len(rows) * n_questions > 0 and all(x["error"] is None for x in echo)
    assert [(x["id"], x["question_id"], x["probs"]) for x in echo] == [
        (x["id"], x["question_id"], x["probs"]) for x in pirate
    ]
    assert [x["probs"] for x in echo] != [x["probs"] for x in plain]  # the option reached the prompt
