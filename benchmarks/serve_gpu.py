"""`openjev-batch serve` under load against `run` on the same rows and engine settings (issue 40's target: at 64
concurrent, at least 70 % of `run`'s throughput; p50 / p99 latency reported).

Workload: N W1-shaped rows (a ~1,000-token conversation, 8 four-option questions; benchmarks/workloads.py), one
request a row. `run`: the rows as one job on a held-open Classifier (engine start excluded, a warm-up job
first). `serve`: the real command in its own process on the same model and engine options, a few warm-up
requests, then for each concurrency C a closed loop of C clients (each sends its next request when its
answer is back) over keep-alive HTTP/1.1 connections, until the N requests are answered. Results:
$OUT/serve_results.json.

    bash benchmarks/gpu.sh benchmarks/serve_gpu.py                       # Qwen3-0.6B shape, bf16 weights
    bash benchmarks/gpu.sh benchmarks/serve_gpu.py --requests 2000 --concurrency 16 64
    bash benchmarks/gpu.sh benchmarks/serve_gpu.py --max-batch 32     # batches below the clients in flight
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/serve_gpu.py --smoke   # CPU plumbing
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import common
from common import OUT, WORK, log, make_model, save
from product import engine_options, open_classifier, run_job


def serve_args(opts: dict) -> list[str]:
    """The serve command's flags for the Classifier keywords `opts` (the same engine both ways)."""
    out = []
    for k, v in opts.items():
        if k == "engine_args":
            for ek, ev in v.items():
                out += ["--engine-arg", f"{ek}={json.dumps(ev) if not isinstance(ev, str) else ev}"]
        elif v is not None:
            out += ["--" + k.replace("_", "-"), str(v)]
    return out


async def one(reader, writer, body: bytes) -> tuple[int, bytes]:
    writer.write(b"POST /v1/records HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    n = next(
        int(ln.split(b":", 1)[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")
    )
    return status, await reader.readexactly(n)


async def load(port: int, bodies: list[bytes], concurrency: int) -> dict:
    """A closed loop of `concurrency` clients over `bodies`; each answer checked to be its own request's."""
    todo = list(enumerate(bodies))
    lat: list[float] = []
    bad: list[str] = []

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while todo:
                i, body = todo.pop()
                t = time.perf_counter()
                status, got = await one(reader, writer, body)
                lat.append(time.perf_counter() - t)
                if status != 200 or json.loads(got)["id"] != json.loads(body)["id"]:
                    bad.append(f"{i}: {status} {got[:200]!r}")
        finally:
            writer.close()

    t = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - t
    lat.sort()
    return {
        "concurrency": concurrency, "requests": len(bodies), "s": round(wall, 3),
        "rows_per_s": round(len(bodies) / wall, 1), "p50_ms": round(1000 * lat[len(lat) // 2], 1),
        "p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1), "errors": len(bad),
        "first_errors": bad[:3],
    }  # fmt: skip


def fresh(row: dict, lead: str) -> dict:
    """`row` with a new id and its conversation's first message opened by `lead` (a prefix no other round has)."""
    first, *rest = row["state"]
    return {
        "id": f"{lead.strip()}{row['id']}",
        "state": [{**first, "content": lead + first["content"]}, *rest],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--batch-wait-ms", type=float, default=2.0)
    ap.add_argument("--max-batch", type=int, default=0, help="serve --max-batch (0: every request waiting)")
    ap.add_argument("--smoke", action="store_true", help="the plumbing on a CPU (tiny model, few requests)")
    a = ap.parse_args()
    import workloads as wl
    from transformers import AutoTokenizer

    shape = "tiny" if a.smoke else "qwen3-0.6b"
    n = 24 if a.smoke else a.requests
    model = make_model(shape, weights=True)
    tok = AutoTokenizer.from_pretrained(model)
    d = WORK / f"serve-{shape}-{n}"
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "w1.jsonl").exists():
        wl.w1(tok, d, rows=n, **({"prefix_tokens": 120} if a.smoke else {}))
    rows_file, qfile = d / "w1.jsonl", d / "w1_questions.json"
    warm_dir = d / "warm"
    warm_dir.mkdir(exist_ok=True)
    if not (warm_dir / "w1.jsonl").exists():
        wl.w1(tok, warm_dir, rows=8 if a.smoke else 64, seed=1, **({"prefix_tokens": 120} if a.smoke else {}))
    opts = engine_options(a.smoke)
    key = f"serve/{shape}/{n}" + (f"/max-batch-{a.max_batch}" if a.max_batch else "")
    res: dict = {"options": opts}

    # run: the rows as one job on a held-open Classifier (the engine start excluded)
    clf, start_s = open_classifier(model, "sglang", **opts)
    try:
        run_job(clf, warm_dir / "w1.jsonl", warm_dir / "w1_questions.json")
        res["run"] = {"start_s": start_s, **run_job(clf, rows_file, qfile)}
        res["run"]["rows_per_s"] = round(n / res["run"]["s"], 1)
        res["pattern"] = getattr(clf.last_summary, "pattern", "")
    finally:
        clf.close()
    log(key, "run", res["run"])
    save({key: res}, "serve_results.json")  # kept if the serve rounds do not finish

    # serve: the real command, the same model and engine options
    port = free_port()
    cmd = [sys.executable, "-m", "openjev_batch", "serve", "-m", str(model), "-b", "sglang", "-q", str(qfile),
           "--port", str(port), "--max-concurrent", str(max(a.concurrency)), "--batch-wait-ms",
           str(a.batch_wait_ms), "--max-batch", str(a.max_batch), *serve_args(opts)]  # fmt: skip
    log(" ".join(cmd))
    OUT.mkdir(parents=True, exist_ok=True)
    errlog = open(OUT / "serve_stderr.log", "w")
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog, cwd=common.ROOT, env=os.environ)
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve exited {proc.returncode}: see serve_stderr.log")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        res["serve_start_s"] = round(time.perf_counter() - t, 1)
        rows = [json.loads(x) for x in rows_file.read_text().splitlines() if x.strip()]
        warm = [json.loads(x) for x in (warm_dir / "w1.jsonl").read_text().splitlines() if x.strip()]
        asyncio.run(load(port, [json.dumps(r).encode() for r in warm], 8))
        for c in a.concurrency:
            # the same rows, each round's conversations opened by its own words: no round finds another's
            # prefixes in the radix cache (the system prompt it shares, as `run`'s rows share it)
            bodies = [json.dumps(fresh(r, f"[round {c}] ")).encode() for r in rows]
            r = asyncio.run(load(port, bodies, c))
            r["vs_run"] = round(r["rows_per_s"] / res["run"]["rows_per_s"], 3)
            res[f"c{c}"] = r
            log(key, f"c{c}", r)
            save({key: res}, "serve_results.json")
    finally:
        proc.send_signal(signal.SIGTERM)
        res["serve_exit"] = proc.wait(120)
        errlog.close()
    save({key: res}, "serve_results.json")
    log(key, json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
