"""`openjev-batch serve` under load on the CPU against `run` on the same rows (issue 46.5's target: on hf at 16
concurrent clients every request answered, p99 latency ≤ 2× what the same rows take through `run` in one job,
0 answers lost to a 504 while the server has capacity).

Workload: N support tickets (examples/tickets.jsonl, each state opened by a tag of its own so no two rows share a
prefix; the 3 questions of examples/ticket_questions.yaml), one request a row. `run`: the rows as one job on a
held-open `openjev_batch.Classifier` (model load excluded, a warm-up job first), and the first 16 rows as a job
of their own (the rows in flight at 16 clients). `serve`: the real command in its own process, the same model,
backend and threads, then for each concurrency C a closed loop of C clients (each sends its next request when
its answer is back) over keep-alive HTTP/1.1 connections, until the N requests are answered. Every round tags
its rows anew. Machine facts and the load average (`uptime`: the machine is shared) are recorded before and
after each phase: on a busy 2-core machine the numbers move with the neighbours' load.

    nice -n 10 .venv/bin/python benchmarks/serve_load.py                      # smollm2-135m, hf, 64 rows
    nice -n 10 .venv/bin/python benchmarks/serve_load.py --rows 32 --clients 1 16
    # the CPU sglang engine (the test engine: README "Development"; one engine each way, so half the KV each)
    SGLANG_USE_CPU_ENGINE=1 PYTHONPATH=tests/shims nice -n 10 .venv/bin/python benchmarks/serve_load.py \
        --backend sglang --engine-arg max_total_tokens=65536 --out benchmarks/results/DATE-cpu-serve-load-sglang.json
Results: benchmarks/results/<date>-cpu-serve-load.json (--out to change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
EXAMPLES = ROOT / "examples"


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """What the numbers were measured on: the cores, the CPU, the releases, the load, our niceness."""
    import torch
    import transformers

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    import importlib.metadata

    try:
        sglang = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        sglang = None
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "torch": torch.__version__,
            "sglang": sglang,
            "transformers": transformers.__version__, "commit": commit.stdout.strip(), "nice": os.nice(0),
            "load_avg_1_5_15": load_avg(), "uptime": subprocess.run(["uptime"], capture_output=True,
                                                                    text=True).stdout.strip()}  # fmt: skip


def tagged(row: dict, tag: str) -> dict:
    """`row` with its id and the first words of its conversation made its own (no prefix shared)."""
    state = row["state"]
    if isinstance(state, str):
        state = tag + state
    else:
        msgs = state["messages"] if isinstance(state, dict) else state
        first = {**msgs[0], "content": tag + msgs[0]["content"]}
        msgs = [first, *msgs[1:]]
        state = {"messages": msgs} if isinstance(state, dict) else msgs
    return {"id": f"{tag.strip()}{row['id']}", "state": state}


def rows(n: int, tag: str) -> list[dict]:
    base = [json.loads(x) for x in (EXAMPLES / "tickets.jsonl").read_text().splitlines() if x.strip()]
    return [tagged(base[i % len(base)], f"{tag}{i:03d}] ") for i in range(n)]


def run_jobs(model: str, backend: str, threads: int, n: int, layout: str, engine_args: dict | None = None) -> dict:
    """`run` through the Python API on a held-open Classifier: a warm-up job, the N rows, the first 16."""
    import openjev_batch as ob

    q = str(EXAMPLES / "ticket_questions.yaml")
    t = time.perf_counter()
    clf = ob.Classifier(model, backend, threads=threads, layout=layout, **({"engine_args": engine_args} if engine_args else {}))
    out: dict = {"load_s": round(time.perf_counter() - t, 1)}
    try:
        clf.run(rows(4, "[warm "), q, output="arrow")
        for key, k in (("rows_all", n), ("rows_16", min(16, n))):
            out[f"load_avg_before_{key}"] = load_avg()
            t = time.perf_counter()
            table = clf.run(rows(k, "[run "), q, output="arrow")
            out[key] = {"rows": k, "s": round(time.perf_counter() - t, 3), "errors": clf.last_summary.errors,
                        "answers": table.num_rows}  # fmt: skip
            out[key]["rows_per_s"] = round(k / out[key]["s"], 3)
    finally:
        clf.close()
    return out


async def one(reader, writer, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on a kept-alive connection: the status, the headers (lower-case names) and the body."""
    writer.write(b"POST /v1/records HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in head[1:] if ln)}
    return status, headers, await reader.readexactly(int(headers["content-length"]))


async def closed_loop(port: int, bodies: list[bytes], clients: int) -> dict:
    """`clients` clients over `bodies`, each sending its next request when its answer is back."""
    todo = list(reversed(bodies))
    lat: list[float] = []
    status: dict[str, int] = {}
    wrong: list[str] = []

    retries = [0]

    async def client() -> None:
        conn = [await asyncio.open_connection("127.0.0.1", port)]

        async def send(body: bytes) -> tuple[int, dict[str, str], bytes]:
            try:
                return await one(*conn[0], body)
            except (asyncio.IncompleteReadError, ConnectionError):  # the server closed an idle keep-alive
                conn[0][1].close()
                conn[0] = await asyncio.open_connection("127.0.0.1", port)
                return await one(*conn[0], body)

        try:
            while todo:
                body = todo.pop()
                t = time.perf_counter()
                code, headers, got = await send(body)
                while code == 529:  # full: come back after Retry-After, as a client of the API should
                    retries[0] += 1
                    await asyncio.sleep(float(headers.get("retry-after", "1")))
                    code, headers, got = await send(body)
                lat.append(time.perf_counter() - t)
                status[str(code)] = status.get(str(code), 0) + 1
                if code == 200 and json.loads(got)["id"] != json.loads(body)["id"]:
                    wrong.append(json.loads(body)["id"])
        finally:
            conn[0][1].close()

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t
    lat.sort()
    pick = lambda q: round(lat[min(len(lat) - 1, int(len(lat) * q))], 3)  # noqa: E731
    return {"clients": clients, "requests": len(bodies), "s": round(wall, 3),
            "rows_per_s": round(len(bodies) / wall, 3), "p50_s": pick(0.5), "p99_s": pick(0.99),
            "max_s": round(lat[-1], 3), "status": status, "retries_on_529": retries[0],
            "answers_not_their_own": wrong}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_rounds(a, out: dict, save) -> None:
    """The real `serve` command, then a closed loop at each concurrency."""
    port = free_port()
    cmd = [sys.executable, "-m", "openjev_batch", "serve", "-m", a.model, "-b", a.backend, "-q",
           str(EXAMPLES / "ticket_questions.yaml"), "--port", str(port), "--threads", str(a.threads),
           "--max-concurrent", str(max(a.clients)), "--layout", a.layout, *a.serve_arg,
           *(x for kv in a.engine_arg for x in ("--engine-arg", kv))]  # fmt: skip
    out["serve_command"] = " ".join(cmd[1:])
    log = open(Path(a.out).with_suffix(".serve.log"), "w")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT, env=os.environ)
    try:
        import httpx

        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve exited {proc.returncode}: see {log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        asyncio.run(closed_loop(port, [json.dumps(r).encode() for r in rows(4, "[warm ")], 1))
        for c in a.clients:
            before = load_avg()
            # enough requests that the clients stay busy: 16 at least, two each up to 64
            bodies = [json.dumps(r).encode() for r in rows(max(16, min(2 * c, 64)), f"[c{c:02d} ")]
            r = asyncio.run(closed_loop(port, bodies, c))
            r.update(load_avg_before=before, load_avg_after=load_avg())
            out["serve"][f"c{c}"] = r
            print(json.dumps(r), flush=True)
            save()
        out["serve_health"] = httpx.get(f"http://127.0.0.1:{port}/v1/status", timeout=30).json()
    finally:
        proc.send_signal(signal.SIGTERM)
        out["serve_exit"] = proc.wait(300)
        log.close()


def verdict(out: dict) -> None:
    """Each round against `run`: throughput, and p99 against the time `run` takes for the rows in flight (C rows:
    the N-row job's time scaled, and at 16 the 16-row job itself)."""
    run_n = out["run"]["rows_all"]
    per_row = run_n["s"] / run_n["rows"]
    for r in out["serve"].values():
        same = out["run"]["rows_16"]["s"] if r["clients"] == 16 else per_row * min(r["clients"], r["requests"])
        r["run_same_rows_s"] = round(same, 3)
        r["p99_over_run_same_rows"] = round(r["p99_s"] / same, 3)
        r["throughput_vs_run"] = round(r["rows_per_s"] / run_n["rows_per_s"], 3)
        r["all_answered"] = r["status"] == {"200": r["requests"]} and not r["answers_not_their_own"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--rows", type=int, default=32, help="rows of the run job; serve rounds send up to 64")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both ways (the machine is shared)")
    ap.add_argument("--layout", default="transcript", help="the prompt layout, both ways (serve's default differs)")
    ap.add_argument("--serve-arg", action="append", default=[], help="one more serve flag (repeat)")
    ap.add_argument("--engine-arg", action="append", default=[], metavar="K=V",
                    help="an sglang.Engine argument, both ways (run's engine_args, serve's --engine-arg)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results" / f"{time.strftime('%Y-%m-%d')}-cpu-serve-load.json"))
    ap.add_argument("--run-from", metavar="RESULTS", help="take run's jobs from an earlier results file")
    ap.add_argument("--verdict", metavar="RESULTS", help="recompute the comparison of a results file, no run")
    a = ap.parse_args()
    if a.verdict:
        out = json.loads(Path(a.verdict).read_text())
        verdict(out)
        Path(a.verdict).write_text(json.dumps(out, indent=1) + "\n")
        return
    out: dict = {"what": "serve under load vs run, same rows (benchmarks/serve_load.py)", "model": a.model,
                 "backend": a.backend, "engine_args": a.engine_arg, "layout": a.layout, "threads": a.threads, "rows": a.rows, "machine_before": machine(),
                 "serve": {}}  # fmt: skip

    def save() -> None:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")

    if a.run_from:  # `run`'s jobs from an earlier results file (the same rows, model and threads)
        out["run"] = {**json.loads(Path(a.run_from).read_text())["run"], "from": Path(a.run_from).name}
    else:
        args = {k: json.loads(v) if v[:1].isdigit() else v for k, _, v in (kv.partition("=") for kv in a.engine_arg)}
        out["run"] = run_jobs(a.model, a.backend, a.threads, a.rows, a.layout, args)
    print(json.dumps(out["run"]), flush=True)
    save()
    serve_rounds(a, out, save)
    verdict(out)
    out["machine_after"] = {"load_avg_1_5_15": load_avg()}
    save()
    print(json.dumps({c: {k: r[k] for k in ("p50_s", "p99_s", "rows_per_s", "p99_over_run_same_rows", "status")}
                      for c, r in out["serve"].items()}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
