"""`--connect URL` (backends/sglang/remote.py): `run` and `serve` driving an sglang server already running
(`python -m sglang.launch_server`, the CPU engine) over its HTTP API, with the same answers as the hf backend's
and the server left running; the same request patterns driven through a RemoteEngine and through the CPU engine;
and the RemoteEngine against tiny real HTTP servers in a thread (a server that never finishes `/generate`, one
that trickles bytes, wrong shapes, a starting one, one that is not sglang), through the real command: each is
one line naming the URL, in time."""

from __future__ import annotations

import http.server
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from conftest import ROOT, cli, sglang_cpu_env, write_jsonl
from serve_process import QUESTIONS, TRANSCRIPT, Server, free_port, httpx, run_rows, tickets

from openjev_batch.backends.sglang.fork_releases import at_least
from openjev_batch.backends.sglang.remote import RemoteEngine, connect
from openjev_batch.errors import BackendError

INFO = {"version": "0.5.19", "model_path": "tiny", "max_total_num_tokens": 100_000, "max_req_input_len": 4000}
Answer = Callable[[http.server.BaseHTTPRequestHandler, bytes], None]


def send(h: http.server.BaseHTTPRequestHandler, status: int, body: bytes, ctype="application/json") -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class FakeServer:
    """A tiny real HTTP server in a thread: `routes` maps a path to an answer (handler, request body); /health
    and /server_info answer as a ready sglang server unless given. `seen` counts the requests per path."""

    def __init__(self, routes: dict[str, Answer], threaded: bool = True):
        self.routes = {"/health": lambda h, b: send(h, 200, b""),
                       "/server_info": lambda h, b: send(h, 200, json.dumps(INFO).encode()), **routes}  # fmt: skip
        self.seen: dict[str, int] = {}
        self.stop = threading.Event()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.seen[self.path] = fake.seen.get(self.path, 0) + 1
                answer = fake.routes.get(self.path)
                if answer is None:
                    send(self, 404, b"no such route", "text/plain")
                else:
                    answer(self, body)

            do_GET = do_POST = _any

        cls = http.server.ThreadingHTTPServer if threaded else http.server.HTTPServer
        cls.request_queue_size = 128  # the RemoteEngine opens up to 64 connections at once
        cls.daemon_threads = True
        self.httpd = cls(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def never_finishes(server: FakeServer) -> Answer:
    """Takes /generate and answers nothing until the server closes (a GPU server stuck in a batch)."""
    return lambda h, b: server.stop.wait()


def trickles(server: FakeServer) -> Answer:
    """Declares a 100 MB answer and sends one byte at a time (httpx's read timeout restarts on every byte)."""

    def answer(h, b):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(100 << 20))
        h.end_headers()
        while not server.stop.wait(0.2):
            h.wfile.write(b" ")
            h.wfile.flush()

    return answer


@pytest.fixture
def fake():
    servers: list[FakeServer] = []

    def make(routes: dict[str, Answer] | Callable[[FakeServer], dict[str, Answer]]) -> FakeServer:
        s = FakeServer({})
        s.routes.update(routes(s) if callable(routes) else routes)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def request() -> dict:
    return dict(input_ids=[1, 2, 3], return_logprob=True, logprob_start_len=-1, token_ids_logprob=[[4, 5]],
                sampling_params={"max_new_tokens": 0, "temperature": 0})  # fmt: skip


@pytest.mark.parametrize("stall", [never_finishes, trickles], ids=["never-finishes", "trickles"])
def test_a_request_has_a_total_deadline_and_then_every_call_fails_at_once(fake, stall):
    """Issue 48.1: /generate that never finishes, or trickles a byte at a time, ended nothing (240 s seen);
    its deadline is wall clock. After it, the server is the job's error: the next call does not wait again."""
    s = fake(lambda s: {"/generate": stall(s)})
    eng = RemoteEngine(s.url, deadline_s=1.0)
    with pytest.raises(BackendError) as e:
        eng.generate(**request())
    assert str(e.value) == (
        f"--connect {s.url}: /generate did not finish within 1 s (--connect-timeout raises this deadline)"
    )
    with pytest.raises(BackendError) as again:
        eng.get_server_info()
    assert again.value is e.value and s.seen.get("/server_info") is None  # no request sent
    eng.shutdown()


@pytest.mark.parametrize(
    "body,ctype,said",
    [
        (b"<html>\n<b>Bad gateway</b>\n</html>", "text/html", "answered text that is not JSON: '<html> <b>Bad gateway</b> </html>'"),
        (b"5", "application/json", "answered a number: 5, not sglang's answer"),  # was AttributeError on every row
        (b"[1, 2]", "application/json", "answered a list: [1, 2], not sglang's answer"),
        (b'{"meta_info": "x"}', "application/json", 'answered an object: {"meta_info": "x"}, not sglang\'s answer'),
    ],
    ids=["text", "number", "list-of-numbers", "meta-not-an-object"],
)  # fmt: skip
def test_a_wrong_shape_is_the_jobs_error_naming_what_came_back(fake, body, ctype, said):
    s = fake({"/generate": lambda h, b: send(h, 200, body, ctype)})
    eng = RemoteEngine(s.url)
    with pytest.raises(BackendError) as e:
        eng.generate(**request())
    assert str(e.value) == f"--connect {s.url}: /generate {said}"
    eng.shutdown()


def test_readiness_waits_for_a_starting_server_and_a_reset_request_is_tried_again(fake):
    """datatrove's wait_until_ready: /health's 503 (sglang loading its model) is waited on; a connection the
    server drops without an answer is tried again (tenacity), and the answer is the server's."""
    health = iter([503, 503, 200])
    generated = iter(["drop", "answer"])

    def gen(h, b):
        if next(generated) == "drop":
            h.close_connection = True  # closes without a byte: httpx's RemoteProtocolError
            return
        send(h, 200, json.dumps({"meta_info": {"prompt_tokens": 3}, "echo": json.loads(b)["input_ids"]}).encode())

    s = fake({"/health": lambda h, b: send(h, next(health), b""), "/generate": gen})
    eng = connect(s.url, deadline_s=30.0)
    assert s.seen["/health"] == 3 and s.seen["/server_info"] == 1
    assert eng.generate(**request()) == {"meta_info": {"prompt_tokens": 3}, "echo": [1, 2, 3]}
    assert s.seen["/generate"] == 2 and eng.fault is None
    eng.shutdown()


def test_the_readiness_wait_keeps_a_connect_timeout_under_30_s(fake):
    """Attack trial (issue 46): a /health that never answered held `--connect-timeout 2` for the facts' fixed
    30 s. Each poll now gets what is left of the deadline."""
    s = fake(lambda s: {"/health": never_finishes(s)})
    t = time.perf_counter()
    with pytest.raises(BackendError) as e:
        connect(s.url, deadline_s=2.0)
    assert time.perf_counter() - t < 10
    assert "/health did not finish within 2 s (--connect-timeout raises this deadline)" in str(e.value), str(e.value)


def test_a_refused_connection_is_tried_three_times_then_one_line(fake):
    s = fake({})
    url = s.url
    s.close()  # nothing listens there now
    with pytest.raises(BackendError) as e:
        connect(url, deadline_s=30.0)
    assert str(e.value).startswith(f"--connect {url}: cannot reach an sglang server there: /health: the network failed 3 tries")
    assert "Errno" not in str(e.value) and "Error" not in str(e.value)


def test_the_release_comparisons_order_pre_releases():
    """Issue 49.4: the hand-written parser read 0.5.17rc1 as 0.5.17 (max_new_tokens 0 on a release before it)."""
    assert at_least("0.5.17", "0.5.17") and at_least("0.5.17.post1", "0.5.17") and at_least("0.5.17+cu128", "0.5.17")
    assert not at_least("0.5.17rc1", "0.5.17") and not at_least("0.5.9", "0.5.17")
    assert not at_least("not a release", "0.5.17")


def _run(tiny_model, tmp_path, url: str, *more: str):
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "T1", "state": "My invoice is wrong."}])
    return cli("run", src, "-q", QUESTIONS, "-o", tmp_path / "o.parquet", "-m", tiny_model, "-b", "sglang",
               "--connect", url, "--no-progress", *more)  # fmt: skip


@pytest.mark.parametrize("stall", [never_finishes, trickles], ids=["never-finishes", "trickles"])
def test_the_command_ends_in_one_line_naming_the_url(fake, tiny_model, tmp_path, stall):
    """Issue 48.1 through the real command: exit 4, one `error:` line naming the URL and the deadline."""
    s = fake(lambda s: {"/generate": stall(s)})
    r = _run(tiny_model, tmp_path, s.url, "--connect-timeout", "2")
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == 4, r.stderr
    assert lines[-1] == (f"error: --connect {s.url}: /generate did not finish within 2 s "
                         "(--connect-timeout raises this deadline)"), r.stderr  # fmt: skip
    assert "Traceback" not in r.stderr and s.seen["/generate"] >= 1


@pytest.mark.parametrize("body", [b"oops, not JSON", b"5", b'"a string"'], ids=["not-json", "number", "string"])
def test_a_wrong_shape_through_the_command_is_exit_4_one_line(fake, tiny_model, tmp_path, body):
    """Issue 48.6: a JSONDecodeError or `'int' object has no attribute 'get'` came out, and whether the job
    stopped (exit 4) or errored every row (exit 3) depended on the shape. Now one outcome and one line."""
    s = fake({"/generate": lambda h, b: send(h, 200, body)})
    r = _run(tiny_model, tmp_path, s.url)
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert r.returncode == 4, r.stderr
    assert lines[-1].startswith(f"error: --connect {s.url}: /generate answered "), r.stderr
    assert "Error" not in lines[-1].removeprefix("error:") and "Traceback" not in r.stderr


def _rows(seed: int):
    """Rows of random ids sharing a prefix (the radix cache's case), 3 questions of 4 labels each."""
    import random

    from openjev_batch.core import BranchSpec, RowPrompt

    rng = random.Random(seed)
    shared = tuple(range(700, 730))
    rows = []
    for i in range(5):
        prefix = shared + tuple(rng.randrange(100, 5000) for _ in range(rng.randrange(5, 20)))
        branches = tuple(
            BranchSpec(f"q{j}", tuple(rng.randrange(100, 5000) for _ in range(rng.randrange(3, 9))),
                       tuple(rng.sample(range(32, 90), 4)))  # fmt: skip
            for j in range(3)
        )
        rows.append(RowPrompt(i, str(i), prefix, branches))
    return rows


@pytest.mark.sglang
def test_the_same_patterns_through_a_remote_engine_and_the_cpu_engine(sglang_backend, tiny_model, fake):
    """Issue 49.1: one constructor, `SGLangBackend(opts, engine=...)`. A RemoteEngine on a tiny HTTP server that
    answers `/generate` with the CPU engine drives each request pattern; every label logprob and token count
    and prompt size is the in-process engine's. The server is single-threaded: the CPU engine's loop runs one request at a time."""
    from openjev_batch.backends import BackendOptions
    from openjev_batch.backends.sglang.engine import SGLangBackend
    from openjev_batch.pipeline.plan import plan

    cpu = sglang_backend.engine
    (w,) = plan(_rows(seed=3), 100_000)
    opts = {p: BackendOptions(model=str(tiny_model), device="cpu", request_pattern=p)
            for p in ("first-branch", "prefix-first")}  # fmt: skip
    want = {}
    try:
        for p, o in opts.items():
            sglang_backend.configure(o)
            cpu.flush_cache()
            want[p] = sglang_backend.prefill(w)
    finally:
        sglang_backend.configure(BackendOptions(model=str(tiny_model), device="cpu"))
    info = json.dumps(cpu.get_server_info(), default=str).encode()

    def generate(h, body):
        out = cpu.loop.run_until_complete(cpu.async_generate(**json.loads(body)))
        send(h, 200, json.dumps(out).encode())

    s = FakeServer({"/server_info": lambda h, b: send(h, 200, info), "/generate": generate,
                    "/flush_cache": lambda h, b: (cpu.flush_cache(), send(h, 200, b""))}, threaded=False)  # fmt: skip
    try:
        remote = SGLangBackend(opts["first-branch"], engine=connect(s.url, deadline_s=60.0))
        assert remote.startup.startswith(f"connected to {s.url} (sglang ") and remote.max_new_tokens == 0
        assert not remote.multi_item and remote.fork is False and remote.no_images.startswith("--connect sends")
        for p, o in opts.items():
            remote.configure(o)
            assert remote.request_pattern == p
            remote.engine.flush_cache()
            got = remote.prefill(w)
            for a_row, b_row in zip(want[p], got, strict=True):
                for a, b in zip(a_row, b_row, strict=True):
                    assert b.error is None and b.logprobs == pytest.approx(a.logprobs, abs=1e-6)
                    # cached tokens differ by arrival: the server answers one request at a time, the engine
                    # batches a group's requests into one forward
                    assert b.prompt_tokens == a.prompt_tokens
        assert s.seen["/generate"] >= 2 * len(w.rows) and sum(x.cached_tokens for r in got for x in r) > 0
        remote.close()
    finally:
        s.close()



@pytest.fixture(scope="module")
def sglang_server(tiny_model, tmp_path_factory):
    """A real sglang HTTP server on the CPU, started as a user would (its CPU settings as the product's)."""
    pytest.importorskip("sglang.srt")
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


@pytest.mark.sglang
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
        *TRANSCRIPT,
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
        (None, "/health did not finish within 30 s"),  # took the connection, never answered: it hung an hour
        ((200, "application/json", b"[]"), "/server_info answered a list: [], not sglang's object"),  # a traceback
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
