"""serve's scheduling and admission (serve/service.py), through the real command on a free port over the tiny
model on the hf backend (issue 46.5): a request waits for its own work and the queue ahead of it, not for every
request in flight; a request given up (504, or its client gone) is never computed; a body is parsed before it
is admitted, so a malformed one is a 422 however full the server is."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time

import pytest
from serve_process import QUESTIONS, Server, tickets

httpx = pytest.importorskip("httpx")


def health(s: Server) -> dict:
    return httpx.get(s.url + "/v1/status", timeout=30).json()


def test_a_burst_is_answered_batch_by_batch_each_answer_its_own(tiny_model, tmp_path):
    """12 requests at once on a budget below one request's engine time: 12 batches, one request each, each
    answered as its batch ends (it was one batch of 12, every request waiting for all of them), and every
    answer is its own request's, equal to what its ticket gets alone."""
    s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "-q", str(QUESTIONS), "--batch-ms", "0.001")
    try:
        rows = tickets(12)
        alone = {}
        for row in rows:
            r = s.post(row)
            assert r.status_code == 200, r.text
            alone[row["id"]] = r.json()["answers"]
        before = health(s)["batches"]

        async def burst():
            async with httpx.AsyncClient(base_url=s.url, timeout=300) as c:
                return await asyncio.gather(*(c.post("/v1/records", json=r) for r in rows))

        got = asyncio.run(burst())
        assert [r.status_code for r in got] == [200] * 12, [r.text for r in got if r.status_code != 200][:2]
        for row, r in zip(rows, got, strict=True):
            assert r.json()["id"] == row["id"]
            for a, b in zip(r.json()["answers"], alone[row["id"]], strict=True):
                assert a["question_id"] == b["question_id"] and a["answer"] == b["answer"]
                assert all(math.isclose(x, y, abs_tol=1e-6) for x, y in zip(a["probs"], b["probs"], strict=True))
        h = health(s)
        assert h["batches"] - before == 12 and h["dropped"] == 0 and h["in_flight"] == 0, h
        assert h["queued_tokens"] == 0, h  # every answered request left the admission forecast's queue
    finally:
        assert s.stop() == 143, s.log


def _send_then_leave(port: int, body: bytes, wait: float) -> None:
    """A client that sends a whole request, waits `wait` seconds (it is admitted and queued) and closes."""
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(b"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(wait)
    c.close()


def test_parsed_before_admission_and_a_request_given_up_is_never_computed(tiny_model, tmp_path):
    """Two slots, and an engine that waits 20 s for a batch to fill (longer than the 10 s timeout): a client that
    leaves frees its slot at once (not at its timeout), and it and two requests that get their 504 are dropped
    from the queue, never computed (0 batches); while the slots are taken, a malformed body is a 422 naming its
    fault (it was a 529: admission came before the parse) and a valid one is a 529."""
    s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "-q", str(QUESTIONS), "--max-concurrent", "2",
               "--timeout", "10", "--batch-wait-ms", "20000")  # fmt: skip
    try:
        _send_then_leave(s.port, json.dumps(tickets(1)[0]).encode(), 1.0)
        left = time.time()
        while health(s)["in_flight"] and time.time() < left + 6:  # its timeout would free it 9 s from now
            time.sleep(0.2)
        assert health(s)["in_flight"] == 0, "the slot of a client that left is held until its timeout"
        got: dict = {}
        waiting = [threading.Thread(target=lambda i=i: got.update({i: s.post(tickets(3)[i])})) for i in (1, 2)]
        for t in waiting:
            t.start()
        time.sleep(1.5)  # both are in flight: every slot taken
        bad = s.post(b'{"state": "x", "questions": ["urgency"]')
        assert bad.status_code == 422 and "malformed JSON" in bad.json()["error"]["message"], bad.text
        busy = s.post(tickets(1)[0])
        assert busy.status_code == 529 and busy.headers["retry-after"] == "1", busy.text
        for t in waiting:
            t.join()
        assert [got[i].status_code for i in (1, 2)] == [504, 504], [got[i].text for i in (1, 2)]
        deadline = time.time() + 120
        while (h := health(s))["dropped"] < 3 and time.time() < deadline:
            time.sleep(0.5)
        assert h["dropped"] == 3 and h["batches"] == 0 and h["in_flight"] == 0, h
        assert h["queued_tokens"] == 0, h  # a request dropped leaves the forecast's queue: no lasting 529
    finally:
        assert s.stop() == 143, s.log
