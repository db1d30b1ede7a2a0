"""The readout registry (readouts/__init__.py) is the one place that names readouts: each declares the job
options it reads (its `Options` type), and the config refuses another readout's, naming the command it
belongs to. A third readout is its own module (a class decorated `@register`) plus one line in `_MODULES`."""

import re
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
    monkeypatch.setattr(readouts, "_MODULES", {**readouts._MODULES, "echo": "echo_readout"})
    monkeypatch.setattr(readouts, "_CLASSES", {**readouts._CLASSES})
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
