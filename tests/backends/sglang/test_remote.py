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
from serve_process import QUESTIONS, Server, free_port, httpx, run_rows, tickets

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
        tmp_path, "-m", str(tiny_model), "-b", "sglang", "--connect", sglang_server, "-q", str(QUESTIONS),
        "--layout", "transcript",  # run's default, which `want` is
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


class _Fake:
    """A server on a free port that is not sglang: `answer` None takes the connection and never answers,
    else every request gets (status, content type, body)."""

    def __init__(self, answer: tuple[int, str, bytes] | None):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.answer, self.held = answer, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.answer is None:
                self.held.append(c)  # never answered, never closed
                continue
            c.recv(65536)
            status, ctype, body = self.answer
            c.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                      f"Connection: close\r\n\r\n".encode() + body)  # fmt: skip
            c.close()


@pytest.mark.parametrize(
    "answer,said",
    [
        (None, "ReadTimeout"),  # took the connection, never answered: it hung for the 1-hour request timeout
        ((200, "application/json", b"[]"), "answered list, not an object"),  # AttributeError traceback, exit 1
        ((404, "text/html", b"<!DOCTYPE HTML>\n<html>\n<body>\n<h1>Not Found</h1>\n</body>\n</html>\n"),
         "answered 404: <!DOCTYPE HTML> <html> <body> <h1>Not Found</h1> </body> </html>"),  # 7 lines of HTML
    ],
    ids=["silent", "not-an-object", "a-web-page"],
)  # fmt: skip
def test_a_server_that_is_not_sglang_is_one_line_in_time(tiny_model, tmp_path, answer, said):
    """Hostile trial: `--connect` to a server that never answers hung an hour; one answering `[]` ended in a
    traceback; a web server's 404 page came out as many lines. Each is one `error:` line, exit 4, within the
    30-s wait for the server's facts."""
    fake = _Fake(answer)
    src = write_jsonl(tmp_path / "in.jsonl", tickets(1))
    t = time.perf_counter()
    r = cli("run", src, "-q", QUESTIONS, "-o", tmp_path / "o.parquet", "-m", tiny_model, "-b", "sglang",
            "--connect", fake.url, "--no-progress")  # fmt: skip
    assert time.perf_counter() - t < 120, "it waited past the facts' 30 s"
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == 4 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: --connect {fake.url}: cannot reach an sglang server there") and said in lines[0]
    fake.sock.close()
