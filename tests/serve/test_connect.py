"""`--connect URL`: `run` and `serve` driving an sglang server already running (`python -m
sglang.launch_server`, the CPU engine) over its HTTP API: the same answers as the hf backend's on the same
rows, the server left running, an unreachable URL one line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT, cli, sglang_cpu_env, write_jsonl
from test_serve import QUESTIONS, Server, free_port, httpx, run_rows, tickets

pytestmark = pytest.mark.sglang


@pytest.fixture(scope="module")
def sglang_server(tiny_model, tmp_path_factory):
    """A real sglang HTTP server on the CPU, started as a user would (its CPU settings as the product's)."""
    pytest.importorskip("sglang")
    from openjev_batch.backends.sglang.kwargs import CPU_KV_TOKENS, cpu_mem_fraction

    port = free_port()
    log = open(tmp_path_factory.mktemp("sglang-server") / "server.log", "w")
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(tiny_model), "--device", "cpu",
           "--port", str(port), "--attention-backend", "torch_native", "--disable-cuda-graph", "--dtype",
           "float32", "--max-total-tokens", str(CPU_KV_TOKENS), "--mem-fraction-static",
           str(cpu_mem_fraction(str(tiny_model), CPU_KV_TOKENS)), "--skip-tokenizer-init", "--sleep-on-idle",
           "--random-seed", "0", "--log-level", "warning", "--load-format", "safetensors"]  # fmt: skip
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **sglang_cpu_env(), "HF_HUB_OFFLINE": "1"},
                         stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        assert p.poll() is None, open(log.name).read()[-3000:]
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(1)
    yield url
    p.terminate()
    p.wait(60)
    log.close()


def test_run_and_serve_drive_a_running_sglang_server(sglang_server, tiny_model, tmp_path):
    want = run_rows(tiny_model, tmp_path, tickets(4), "-q", QUESTIONS)  # the hf reference
    src = write_jsonl(tmp_path / "in.jsonl", tickets(4))
    out = tmp_path / "connect.parquet"
    r = cli("run", src, "-q", QUESTIONS, "-o", out, "-m", tiny_model, "-b", "sglang", "--connect", sglang_server,
            "--threads", "1", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"connected to {sglang_server}" in r.stderr
    import pyarrow.parquet as pq

    got = pq.read_table(out).to_pylist()
    assert len(got) == 12 and sum(x["cached_tokens"] for x in got) > 0  # the server's radix cache served
    for g in got:
        w = want[(g["id"], g["question_id"])]
        assert g["answer"] == w["answer"] and g["error"] is None
        assert all(math.isclose(a, b, abs_tol=1e-5) for a, b in zip(g["probs"], w["probs"], strict=True))
    # serve over the same running server: one request, the same answers; the server outlives both
    s = Server(
        tmp_path, "-m", str(tiny_model), "-b", "sglang", "--connect", sglang_server, "-q", str(QUESTIONS)
    )
    try:
        resp = s.post(tickets(1)[0])
        assert resp.status_code == 200, resp.text
        for a in resp.json()["answers"]:
            w = want[("T001", a["question_id"])]
            assert a["answer"] == w["answer"]
            assert all(math.isclose(x, y, abs_tol=1e-5) for x, y in zip(a["probs"], w["probs"], strict=True))
    finally:
        assert s.stop() == 143, s.log
    assert httpx.get(sglang_server + "/health", timeout=5).status_code == 200


def test_an_unreachable_server_is_one_line(tiny_model, tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", tickets(1))
    url = f"http://127.0.0.1:{free_port()}"
    r = cli("run", src, "-q", QUESTIONS, "-o", tmp_path / "o.parquet", "-m", tiny_model, "-b", "sglang",
            "--connect", url, "--no-progress")  # fmt: skip
    assert r.returncode == 4 and f"--connect {url}: cannot reach an sglang server there" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
