"""serve's fate (serve/app.py), through the real command: SIGHUP drains as SIGTERM does (issue 48.2: it dropped
the requests in flight with no answer, exited 129 and printed nothing)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from serve_process import QUESTIONS, Server, tickets

httpx = pytest.importorskip("httpx")


def test_sighup_mid_request_answers_it_then_exits_129(tiny_model, tmp_path):
    # the server inherits SIGHUP's default, as from a terminal (under `nohup` it is ignored, and so it stays)
    old = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "-q", str(QUESTIONS), "--batch-wait-ms", "4000")
    finally:
        signal.signal(signal.SIGHUP, old)
    alone = s.post(tickets(2)[1])
    assert alone.status_code == 200, alone.text
    got = {}
    t = threading.Thread(target=lambda: got.update(r=s.post(tickets(2)[1])))
    t.start()
    time.sleep(1.5)  # the request waits in the batch window
    s.proc.send_signal(signal.SIGHUP)
    t.join()
    assert s.proc.wait(120) == 129, s.log
    r = got["r"]
    assert r.status_code == 200, r.text
    assert r.json()["answers"] == alone.json()["answers"]
    with pytest.raises(httpx.TransportError):
        s.post(tickets(1)[0], timeout=5)
    assert "stopped (SIGHUP): the requests in flight were answered" in s.log, s.log
    assert "Traceback" not in s.log
