"""Standard input spooled to a file (pipeline/input/stdin.py): sniffed by its first bytes, and never copied past the
disk's reserve (`validate - < /dev/zero` filled a 70 GB disk in the hostile trial)."""

from __future__ import annotations

import io
import shutil

import pytest

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
    monkeypatch.setattr(stdin, "CHECK_BYTES", 1 << 20)
    with pytest.raises(InputFileError, match="standard input would fill the disk") as e:
        stdin.spool_stdin(tmp_path, io.BufferedReader(Endless()))
    assert "give the file by its path" in str(e.value)
    assert list(tmp_path.iterdir()) == []  # the partial copy is removed
