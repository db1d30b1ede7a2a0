"""Adversarial input found by the break-it pass: each case runs the real CLI and checks the exit code,
the one-line message (never a traceback) and what was written."""

from __future__ import annotations

import gzip
import json

import pytest
from conftest import cli

Q = {"q": {"type": "noul", "instructions": "Is it about money?"}}


def _questions(tmp_path):
    qf = tmp_path / "q.json"
    qf.write_text(json.dumps(Q))
    return qf


@pytest.mark.parametrize(
    "name, data, message",
    [
        ("bad.jsonl.gz", b"\x1f\x8b\x08\x00garbage", "Truncated compressed stream"),
        (
            "cut.jsonl.gz",
            gzip.compress(b'{"id": "a", "state": "x"}\n' * 200)[:-30],
            "Truncated compressed stream",
        ),
        ("bad.jsonl.zst", b"\x28\xb5\x2f\xfdgarbage", "ZSTD decompress failed"),
        ("bad.json.gz", b"\x1f\x8b\x08\x00garbage", "Truncated compressed stream"),
    ],
)
def test_corrupt_compressed_input_is_a_job_error(tmp_path, name, data, message):
    inp = tmp_path / name
    inp.write_bytes(data)
    r = cli("validate", inp, "-q", _questions(tmp_path))
    assert r.returncode == 4 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "cannot read as JSON" in r.stderr and message in " ".join(r.stderr.split()), r.stderr


def test_corrupt_compressed_input_run_fails_once(tmp_path, tiny_model):
    inp = tmp_path / "cut.jsonl.gz"
    inp.write_bytes(gzip.compress(b'{"id": "a", "state": "x"}\n' * 200)[:-30])
    out = tmp_path / "o.parquet"
    r = cli("run", inp, "-q", _questions(tmp_path), "-m", tiny_model, "-b", "hf", "-o", out, "--no-progress")
    assert r.returncode == 4 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "Truncated compressed stream" in r.stderr and not out.exists()
