"""serve's limit on request heads (serve/headers.py), through the real command (issue 48.3): a connection that
never finishes its headers held its socket with no limit (1,100 open after 60 s); now it gets a 408 in the
API's error shape and is closed within --header-timeout, on a fresh connection and on a kept-alive one."""

from __future__ import annotations

import json
import socket

import pytest
from serve_process import QUESTIONS, Server

httpx = pytest.importorskip("httpx")


def _until_closed(c: socket.socket) -> bytes:
    """Everything the server sends until it closes (socket.timeout, failing the test, if it never does)."""
    c.settimeout(30)  # far past the 2 s limit
    got = b""
    while chunk := c.recv(4096):
        got += chunk
    return got


def test_a_head_never_finished_gets_408_and_is_closed(tiny_model, tmp_path):
    s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "-q", str(QUESTIONS), "--header-timeout", "2")
    try:
        half = socket.create_connection(("127.0.0.1", s.port))
        half.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Le")
        kept = socket.create_connection(("127.0.0.1", s.port))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(30)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200"), "the first request on the kept connection"
        kept.sendall(b"GET /health HTTP/1.1\r\nHo")  # the next head on it stalls
        # meanwhile the server answers others
        r = s.post({"id": "t", "state": "My card was charged twice", "questions": ["refund_request"]})
        assert r.status_code == 200, r.text
        for c in (half, kept):
            got = _until_closed(c)
            head, _, body = got.rpartition(b"HTTP/1.1 408 Request Timeout\r\n")[2].partition(b"\r\n\r\n")
            assert b"HTTP/1.1 408 Request Timeout" in got, got
            assert json.loads(body) == {"error": {"status": 408, "field": None,
                                                  "message": "headers: not sent within 2 s"}}  # fmt: skip
            c.close()
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    finally:
        assert s.stop() == 143, s.log
