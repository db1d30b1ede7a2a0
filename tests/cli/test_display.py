"""What a person sees in a terminal: the real command in a pseudo-terminal, its bytes replayed on a small
VT100 screen (autowrap, carriage return, erase line, cursor up), as the issue-26 trial saw it."""

from __future__ import annotations

import os
import re
import select
import sys
import time

import pytest
from conftest import ROOT, write_jsonl

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")


def _screen(data: str, width: int) -> list[str]:
    """The lines a VT100-like terminal of `width` columns shows after `data`: a character written in the last
    column leaves the cursor there with the wrap pending (the next character starts a new line), as xterm."""
    lines, row, col, pending = [[]], 0, 0, False
    for m in re.finditer(r"\x1b\[([?0-9;]*)([A-Za-z])|(.)", data, re.S):
        arg, cmd, ch = m.groups()
        if cmd == "K":
            lines[row] = [] if arg in ("2", "1") else lines[row][:col]
        elif cmd == "A":
            row, pending = max(row - int(arg or 1), 0), False
        elif cmd:
            continue  # colours, cursor visibility
        elif ch == "\r":
            col, pending = 0, False
        elif ch == "\n":
            row, pending = row + 1, False
        elif ch >= " ":
            if pending:
                row, col, pending = row + 1, 0, False
            while len(lines) <= row:
                lines.append([])
            line = lines[row]
            line.extend(" " * (col + 1 - len(line)))
            line[col] = ch
            col, pending = (col, True) if col == width - 1 else (col + 1, False)
        while len(lines) <= row:
            lines.append([])
    return ["".join(line).rstrip() for line in lines]


def _interrupted_in_a_terminal(args: list[str], width: int = 80) -> tuple[int, str]:
    """Run the real command on a pseudo-terminal of `width` columns, type Ctrl-C once its bar counts a row,
    and return its exit status and everything the terminal received (the echoed `^C` included)."""
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(ROOT)
        os.environ.update(HF_HUB_OFFLINE="1", COLUMNS=str(width))
        os.execv(sys.executable, [sys.executable, "-m", "openjev_batch", *args])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, width, 0, 0))
    buf, typed, deadline = b"", False, time.time() + 300
    while time.time() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            buf += chunk
        if not typed and re.search(rb"[1-9][0-9,]*/[0-9,]+ questions", buf):
            os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to the job and `^C` echoed
            typed = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), buf.decode("utf-8", "replace")


def test_ctrl_c_leaves_the_last_progress_line_once_and_no_loading_bar(tiny_model, tmp_path):
    """Ctrl-C in an 80-column terminal: the bar's lines are on screen once, then `interrupted`. The bar was
    drawn full width, so the echoed `^C` wrapped to a new line and the final redraw left the bar's first
    line on screen twice. transformers' own `Loading weights` bar is not drawn above the product's."""
    rows = [{"id": f"r{i}", "state": f"ticket {i}: it broke", "questions": {"u": {"type": "noul",
             "instructions": "Urgent?"}}} for i in range(4000)]  # fmt: skip
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    args = ["run", str(src), "-m", str(tiny_model), "-b", "hf", "-o", str(tmp_path / "o.parquet")]
    code, data = _interrupted_in_a_terminal([*args, "--chunk-rows", "50"])
    assert code == 130, data[-3000:]
    assert "^C" in data  # the terminal did echo it: the case this is about
    screen = _screen(data, 80)
    bar = [line for line in screen if line.startswith("prefill")]
    assert len(bar) == 1, "\n".join(screen)
    assert any(line.startswith("interrupted: ") for line in screen), screen
    assert "Loading weights" not in data  # (the hf loader: load.py)


@pytest.mark.parametrize("verbosity,shown", [(None, False), ("info", True)])
def test_loading_weights_bar_only_when_transformers_is_asked_for_more(tiny_model, tmp_path, verbosity, shown):
    """The hf loader hides transformers' `Loading weights` bar, unless TRANSFORMERS_VERBOSITY asks for
    transformers' own output (info or debug)."""
    import subprocess

    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "it broke", "questions": {"u": {
        "type": "noul", "instructions": "Urgent?"}}}])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_VERBOSITY"}
    env.update(HF_HUB_OFFLINE="1", **({"TRANSFORMERS_VERBOSITY": verbosity} if verbosity else {}))
    args = ["run", src, "-m", tiny_model, "-b", "hf", "-o", tmp_path / "o.parquet"]
    r = subprocess.run([sys.executable, "-m", "openjev_batch", *map(str, args)], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert ("Loading weights" in r.stderr) is shown, r.stderr


def test_a_long_error_is_one_line_in_a_log_whatever_the_width(tmp_path):
    """stderr to a file (cron, `2>job.log`): rich wrapped at 80 columns, splitting `error: …` in two, so a log
    grep for the message missed it (new-user trial, 2026-12-05). COLUMNS unset, as under cron."""
    import subprocess

    missing = tmp_path / ("x" * 120 + ".jsonl")
    q = tmp_path / "q.yaml"
    q.write_text("topic:\n  type: choice\n  instructions: Which topic is it about?\n  criteria: [a]\n")
    write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "state": "x"}])
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for args in (["run", missing, "-o", tmp_path / "o.parquet", "-m", "-"], ["validate", tmp_path / "in.jsonl", "-q", q]):
        r = subprocess.run([sys.executable, "-m", "openjev_batch", *map(str, args)], capture_output=True, text=True,
                           cwd=ROOT, env=env, timeout=300)  # fmt: skip
        assert r.returncode == 4, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > 100, r.stderr
