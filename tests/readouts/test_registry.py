"""The readout registry (readouts/__init__.py) is the one place that names readouts: each declares the job
options it reads, and the config refuses another readout's, naming the command it belongs to. A third
readout is its own module plus one `register` line."""

import re
import sys
from pathlib import Path

import pytest

from openjev_batch import readouts
from openjev_batch.config import build_config
from openjev_batch.errors import ConfigError


def _cfg(**kw):
    return build_config(input=Path("-"), model="", backend="hf", **kw)


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        (
            {"readout": "classifier-head", "questions_file": Path("q.yaml")},
            "--questions is for run (label-logprobs)",
        ),
        ({"readout": "classifier-head", "system_prompt": "x"}, "--system-prompt is for run (label-logprobs)"),
        ({"template": "{premise} / {hypothesis}"}, "--template is for classify (classifier-head)"),
    ],
)
def test_an_option_of_another_readout_is_refused_naming_its_command(kw, why):
    with pytest.raises(ConfigError, match=re.escape(f"invalid options: {why}, not for")):
        _cfg(**kw)


def test_a_third_readout_is_its_module_and_one_register_line(tmp_path, monkeypatch):
    (tmp_path / "echo_readout.py").write_text(
        'BASE_COLUMNS = ("id", "echo", "error")\n'
        'INPUT_COLUMNS = ("id", "text")\n'
        'TEXT_COLUMN = "text"\n'
        "OPTIONS = {}\n"
        'COMMAND = "echo"\n'
        "def build(cfg, labels, **options):\n"
        '    return ("echo readout", cfg.keep)\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(readouts, "_REGISTRY", {**readouts._REGISTRY})
    monkeypatch.setattr(readouts, "NAMES", (*readouts.NAMES, "echo"))
    readouts.register("echo", "echo_readout")
    cfg = _cfg(readout="echo", keep=("channel",))
    assert readouts.build("echo", cfg) == ("echo readout", ("channel",))
    assert readouts.text_column("echo") == "text" and readouts.base_columns("echo") == ("id", "echo", "error")
    with pytest.raises(
        ConfigError, match=r"--questions is for run \(label-logprobs\), not for echo \(echo\)"
    ):
        _cfg(readout="echo", questions_file=Path("q.yaml"))
    with pytest.raises(ConfigError, match="keep: --keep column.s. echo clash with output columns"):
        _cfg(readout="echo", keep=("echo",))
    sys.modules.pop("echo_readout", None)
