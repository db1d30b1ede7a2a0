"""The `openjev-batch` console script a user runs is the same entry as `python -m openjev_batch`, with its one-line
handlers (openjev_batch/__main__.py). It once named Typer's app, which skipped them: out of memory at import was a
traceback from `openjev-batch` and one line from `python -m`."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_batch.errors import OUT_OF_MEMORY

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "openjev-batch"  # what pip wrote for [project.scripts]


def test_pyproject_names_the_entry_python_m_runs():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"openjev-batch": "openjev_batch.__main__:entry"}
    assert "openjev_batch.__main__:entry" in SCRIPT.read_text() or "from openjev_batch.__main__ import entry" in (
        SCRIPT.read_text()
    ), SCRIPT.read_text()  # the installed script is the current one (an old editable install names cli:app)


def test_the_installed_command_says_out_of_memory_in_one_line():
    def limit():  # too little address space to map torch's libraries: the import itself fails
        resource.setrlimit(resource.RLIMIT_AS, (60_000 * 1024, 60_000 * 1024))

    r = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, preexec_fn=limit, timeout=300)
    assert r.returncode == 4 and r.stderr.strip().splitlines() == [f"error: {OUT_OF_MEMORY}"], r.stderr[-3000:]
    ok = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "serve" in ok.stdout and "calibrate" in ok.stdout, ok.stderr[-2000:]
