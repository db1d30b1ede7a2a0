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
            gzip.compress(b'{"id": "a", "state": "x"}\n' * 200, mtime=0)[:-30],
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


@pytest.mark.parametrize(
    "text",
    [
        # json.dumps' default escapes an emoji as a surrogate pair, which PyYAML read as two lone surrogates
        json.dumps({"q": {"type": "noul", "instructions": "Is the customer happy \U0001f600?"}}),
        json.dumps(Q, indent="\t"),  # tab indentation: not YAML
        json.dumps({"q" * 1500: Q["q"]}),  # a key over PyYAML's 1,024-character simple-key limit
    ],
    ids=["escaped-emoji", "tabs", "long-key"],
)
def test_valid_json_questions_file_is_read_as_json(tmp_path, text):
    qf = tmp_path / "q.json"
    qf.write_text(text)
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x"}) + "\n")
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 0 and "1 row, 1 question, 0 questions with errors" in r.stdout, r.stdout + r.stderr


def test_json_questions_file_with_a_repeated_key_is_refused(tmp_path):
    qf = tmp_path / "q.json"
    qf.write_text('{"q": {"type": "noul", "instructions": "x"}, "q": {"type": "noul", "instructions": "y"}}')
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x"}) + "\n")
    r = cli("validate", inp, "-q", qf)
    assert r.returncode == 4 and "duplicate key 'q'" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_second_job_on_the_same_output_is_refused(tmp_path, tiny_model):
    """Two jobs on one -o: the second deleted the first's partial folder and both wrote each other's parts.
    The first job holds `<out>.lock` and has written a part; here the test is that job (an OutputStore)."""
    from openjev_batch.pipeline.output.store import OutputStore
    from openjev_batch.readouts.label_logprobs import OUTPUT_SCHEMA

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"r{i}", "state": f"ticket {i}"}) + "\n" for i in range(3)))
    out = tmp_path / "o.parquet"
    args = ("run", inp, "-q", _questions(tmp_path), "-m", tiny_model, "-b", "hf", "-o", out, "--no-progress")
    partial = tmp_path / "o.parquet.partial"
    running = OutputStore(out)
    running.begin_chunk(0, 1, 1, "h0")
    running.write(0, [{**dict.fromkeys(OUTPUT_SCHEMA.names), "id": "first", "error": "x"}])
    part = running.part(0).read_bytes()
    r = cli(*args)
    assert r.returncode == 4 and "Traceback" not in r.stderr, r.stderr
    assert "another job is writing" in " ".join(r.stderr.split()), r.stderr
    assert running.part(0).read_bytes() == part and not out.exists()
    running.release()  # the first job stopped: the next run starts afresh over its partial
    r = cli(*args)  # the lock released: the job runs and leaves no lock file behind
    assert r.returncode == 0, r.stderr
    assert out.exists() and not partial.exists() and not (tmp_path / "o.parquet.lock").exists()


@pytest.mark.parametrize("command", ["run", "classify"])
def test_engine_arg_without_a_value_is_a_job_error(tmp_path, command):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x", "text": "x"}) + "\n")
    r = cli(command, inp, "-m", "m", "-b", "hf", "-o", tmp_path / "o.parquet", "--engine-arg", "foo")
    assert r.returncode == 4 and "Traceback" not in r.stderr and "╭" not in r.stderr, r.stderr
    assert "--engine-arg expects key=value, got 'foo'" in r.stderr, r.stderr


@pytest.mark.parametrize("device, message", [("tpu", "unknown device 'tpu'"), ("cuda", "no CUDA GPU")])
def test_bad_device_is_a_job_error(tmp_path, tiny_model, device, message):
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "state": "x"}) + "\n")
    out = tmp_path / "o.parquet"
    r = cli(
        "run", inp, "-q", _questions(tmp_path), "-m", tiny_model, "-b", "hf", "-o", out, "--device", device
    )
    assert r.returncode == 4 and "Traceback" not in r.stderr and "╭" not in r.stderr, r.stderr
    assert message in r.stderr and not out.exists(), r.stderr
