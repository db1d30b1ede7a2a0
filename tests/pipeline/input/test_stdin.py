"""Standard input spooled to a file (pipeline/input/stdin.py): sniffed by its first bytes, and never copied past the
disk's reserve (`validate - < /dev/zero` filled a 70 GB disk in the hostile trial)."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import threading

import pytest
from conftest import EXAMPLES, cli

from openjev_batch.errors import InputFileError
from openjev_batch.pipeline.input import stdin


def test_stdin_is_named_by_its_format(tmp_path):
    got = stdin.spool_stdin(tmp_path, io.BytesIO(b'{"id": "a", "state": "x"}\n'))
    assert got.name == "stdin.jsonl" and got.read_bytes() == b'{"id": "a", "state": "x"}\n'


class Endless(io.RawIOBase):
    """/dev/zero: bytes without end (and without a line break)."""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        b[:] = bytes(len(b))
        return len(b)


def test_stdin_stops_before_the_disk_reserve_and_leaves_no_file(tmp_path, monkeypatch):
    free = shutil.disk_usage(tmp_path).free
    # a reserve of all but 5 MiB of what is free: the copy must stop near 5 MiB, not run on
    monkeypatch.setattr(stdin, "RESERVE_MIN", free - (5 << 20))
    monkeypatch.setattr(stdin, "RESERVE_FRACTION", 0.0)
    monkeypatch.setattr(stdin, "RESERVE_OF_FREE", 1.0)  # the reserve as set, not half of what is free
    monkeypatch.setattr(stdin, "CHECK_BYTES", 1 << 20)
    with pytest.raises(InputFileError, match="standard input would fill the disk") as e:
        stdin.spool_stdin(tmp_path, io.BufferedReader(Endless()))
    assert "give the file by its path" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # the partial copy is removed


def test_a_small_stdin_is_copied_to_a_disk_with_less_free_than_the_reserve(tmp_path, monkeypatch):
    """Issue 34.18: a TMPDIR with under 1 GiB free (a small tmpfs) refused every standard input, however
    small; the reserve is now at most half of what is free, so a small input is copied."""
    monkeypatch.setattr(stdin, "RESERVE_MIN", shutil.disk_usage(tmp_path).free + (1 << 30))  # "under 1 GiB"
    got = stdin.spool_stdin(tmp_path, io.BytesIO(b'{"id": "a", "state": "x"}\n'))
    assert got.read_bytes() == b'{"id": "a", "state": "x"}\n'


def _feed_fifo(path, data: bytes) -> threading.Thread:
    """A FIFO at `path` that a writer thread fills once (blocks until the command opens it)."""
    os.mkfifo(path)

    def write() -> None:
        with open(path, "wb") as f:
            f.write(data)

    t = threading.Thread(target=write, daemon=True)  # daemon: a command that never opens it leaves it
    t.start()
    return t


def test_a_fifo_input_is_read_once_as_stdin_is(tmp_path):
    """Issue 34.14: a FIFO as the input (a shell's `<(zcat big.jsonl.gz)`) was opened again after its first
    read (row count, columns, chunks) and hung, or said "no rows"; it is now copied once, as `-` is, and
    sniffed (here gzip-compressed JSONL under a name without the .gz)."""
    rows = b"".join(b'{"id": "r%d", "state": "hello"}\n' % i for i in range(3))
    fifo = tmp_path / "rows.jsonl"
    writer = _feed_fifo(fifo, gzip.compress(rows))
    r = cli("validate", fifo, "-q", EXAMPLES / "ticket_questions.yaml", timeout=300)
    writer.join(timeout=5)
    assert r.returncode == 0 and "3 rows" in r.stdout, r.stdout + r.stderr
    empty = tmp_path / "empty.jsonl"
    writer = _feed_fifo(empty, b"")
    r = cli("validate", empty, "-q", EXAMPLES / "ticket_questions.yaml", timeout=300)
    assert r.returncode == 4 and f"{empty}: the pipe is empty" in " ".join(r.stderr.split()), r.stderr


def test_resume_refuses_a_fifo_input(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)  # never opened: the refusal comes from its type alone
    r = cli("run", fifo, "-q", EXAMPLES / "ticket_questions.yaml", "-m", "smollm2-135m", "-o", tmp_path / "o.jsonl",
            "--resume", timeout=300)  # fmt: skip
    assert r.returncode != 0 and "is a pipe: it cannot be read again" in " ".join(r.stderr.split()), r.stderr
