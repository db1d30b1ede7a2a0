"""The real `openjev-batch serve` in a process of its own (`Server`), and the rows and questions the serve
tests and the `--connect` tests (tests/backends/sglang/test_remote.py) send it and compare with `run`'s."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import EXAMPLES, ROOT, cli, write_jsonl

httpx = pytest.importorskip("httpx")

QUESTIONS = EXAMPLES / "ticket_questions.yaml"
TRANSCRIPT = ("--layout", "transcript")  # run's default layout, which the tests comparing with plain `run` ask


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The real `openjev-batch serve` in a process of its own; `url`, `proc`, `log` (its stderr)."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None, wait: float = 500):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openjev_batch", "serve", "--port", str(self.port), "--threads", "1", *args],
            cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
            stdout=subprocess.DEVNULL, stderr=self._log,
        )  # fmt: skip
        deadline = time.time() + wait
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the server did not start: {self.log}")

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def post(self, body, **kw) -> httpx.Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        path = kw.pop("path", "/v1/records")  # the product's record route; the seed's: tests/serve/test_seed.py
        return httpx.post(self.url + path, content=data, timeout=kw.pop("timeout", 300), **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(120)
        self._log.close()
        return code


def tickets(n: int | None = None) -> list[dict]:
    rows = [json.loads(x) for x in (EXAMPLES / "tickets.jsonl").read_text().splitlines() if x.strip()]
    return [{"id": r["id"], "state": r["state"]} for r in rows[:n]]


def run_rows(tiny_model, tmp_path, rows, *args) -> dict[tuple[str, str], dict]:
    """`run` over `rows`: its output records by (id, question_id)."""
    src = write_jsonl(tmp_path / f"in{len(args)}.jsonl", rows)
    out = tmp_path / f"out{len(args)}.parquet"
    r = cli("run", src, "-o", out, "-m", tiny_model, "-b", "hf", "--threads", "1", "--no-progress", *args)
    assert r.returncode == 0, r.stderr
    return {(x["id"], x["question_id"]): x for x in pq.read_table(out).to_pylist()}
