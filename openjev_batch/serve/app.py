"""The HTTP side: a Starlette app on uvicorn, run in a thread of its own while the main thread runs the engine
(service.py), and the server's fate.

    POST /v1/systemone   one row (`id`, `state` or `messages`, `questions`) → one answer per question, with
                         the columns and numbers `run` writes for that row; `usage`; the headers
                         x-openjev-prefix-tokens, x-openjev-cached-tokens and Server-Timing
    GET  /health         200 while the engine serves, 503 once it has stopped or the server drains
    GET  /v1/models      the model, its manifest hashes (the `--resume` key's: model content, engine
                         settings, questions, system prompt, calibration) and the releases (sglang's)

Starlette rather than FastAPI: the body is read and parsed by the product's own rules (request.py), so
FastAPI's validation layer would run for nothing. SIGTERM (and Ctrl-C) drains: uvicorn stops accepting, the
requests in flight are answered, then the process exits 143 (130). An engine that dies answers what waits
with 503 and ends the server with exit 4 and one line (`error: …`), so an orchestrator restarts it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .._version import __version__
from ..backends import NAMES as BACKEND_NAMES
from ..errors import BackendError, ConfigError
from .limits import HTTPError, Limits
from .request import Readouts, parse_body, parse_request
from .service import Answer, Service, clean

EXIT_TERMINATED, EXIT_INTERRUPTED = 143, 130
BIG_BODY = 64 * 2**10  # bodies over this are parsed in a worker thread, off the event loop


class Stop:
    """SIGTERM / SIGINT: recorded, and the HTTP server told to stop accepting (installed before the model
    loads, so a signal during start-up is kept too). Exit 143 / 130 once the requests in flight are answered."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.server: Any = None

    def install(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._handler)

    def _handler(self, signum: int, frame) -> None:
        self.signum = self.signum or signum
        if self.server is not None:
            self.server.should_exit = True

    @property
    def code(self) -> int | None:
        if self.signum is None:
            return None
        return EXIT_TERMINATED if self.signum == signal.SIGTERM else EXIT_INTERRUPTED


def make_app(
    service: Service, readouts: Readouts, limits: Limits, models: dict[str, Any], draining: Callable[[], bool]
):
    """The ASGI app over `service`."""
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect, Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    model_name = models["data"][0]["id"]
    busy = {"n": 0}

    def error(e: HTTPError) -> Response:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise HTTPError(
                413, f"body: {int(declared):,} bytes, this server takes at most {limits.max_body_bytes:,}"
            )
        parts, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > limits.max_body_bytes:
                raise HTTPError(
                    413, f"body: over {limits.max_body_bytes:,} bytes, the most this server takes"
                )
            parts.append(chunk)
        return b"".join(parts)

    def parse(raw: bytes):
        try:
            return parse_request(parse_body(raw), readouts, limits)
        except HTTPError:
            raise
        except RecursionError:
            raise HTTPError(422, "body: nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - a body the readers did not foresee: its one line, not a traceback
            raise HTTPError(
                422, f"body: cannot be read as a row: {type(e).__name__}: {str(e)[:300]}"
            ) from None

    async def systemone(request: Request) -> Response:
        t0 = time.perf_counter()
        if busy["n"] >= limits.max_concurrent:
            return error(HTTPError(529, f"{limits.max_concurrent} requests are being evaluated, the most this "
                                   "server takes at once: retry", headers={"Retry-After": str(limits.retry_after_s)}))  # fmt: skip
        busy["n"] += 1
        try:
            raw = await read_body(request)
            if len(raw) > BIG_BODY:
                from starlette.concurrency import run_in_threadpool

                row = await run_in_threadpool(parse, raw)
            else:
                row = parse(raw)
            t_parse = time.perf_counter() - t0
            fut = service.submit(row, asyncio.get_running_loop())
            try:
                got = await asyncio.wait_for(fut, limits.timeout_s)
            except asyncio.TimeoutError:
                raise HTTPError(504, f"no answer from the engine within {limits.timeout_s:g} s") from None
            if isinstance(got, HTTPError):
                raise got
            return answer(row.id, got, t_parse)
        except HTTPError as e:
            return error(e)
        except ClientDisconnect:  # the client left before its body arrived: nobody to answer
            return Response(status_code=400)
        finally:
            busy["n"] -= 1

    def answer(row_id: str, got: Answer, t_parse: float) -> Response:
        records = [{k: clean(v) for k, v in r.items()} for r in got.records]
        cached = sum(r["cached_tokens"] or 0 for r in records)
        usage = {"input_tokens": sum(r["branch_tokens"] or 0 for r in records), "cached_tokens": cached,
                 "output_tokens": 0}  # fmt: skip
        t = got.timing
        timing = ", ".join(
            f'{name};dur={ms * 1000:.3f};desc="{desc}"'
            for name, ms, desc in (
                ("prep", t_parse + t.get("prep", 0.0), "prompt preparation"),
                ("queue", t.get("queue", 0.0), "waiting for the engine"),
                ("prefill", t.get("prefill", 0.0), "shared prefill"),
                ("branches", t.get("branches", 0.0), "branch inference"),
            )
        )
        headers = {"x-openjev-prefix-tokens": str(got.prefix_tokens), "x-openjev-cached-tokens": str(cached),
                   "Server-Timing": timing}  # fmt: skip
        failed = [r["error"] for r in records if r["error"]]
        body = {"id": row_id, "model": model_name, "answers": records, "usage": usage}
        if failed:  # limits and questions were checked before: what fails now is the engine
            body["error"] = {"status": 502, "field": None, "message": failed[0]}
        content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
        return Response(
            content, status_code=502 if failed else 200, headers=headers, media_type="application/json"
        )

    async def health(request: Request) -> Response:
        if service.dead is not None:
            return JSONResponse({"status": "dead", "why": service.dead}, status_code=503)
        if draining():
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse(
            {"status": "ok", "model": model_name, "in_flight": busy["n"], "batches": service.batches}
        )

    async def list_models(request: Request) -> Response:
        return JSONResponse(models)

    return Starlette(
        routes=[
            Route("/v1/systemone", systemone, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", list_models, methods=["GET"]),
        ]
    )


def models_info(name: str, clf: Any, cfg: Any, readout: Any) -> dict[str, Any]:
    """GET /v1/models: the model as named and as loaded, the manifest hashes a `run` output of this model and
    these settings carries, and the releases."""
    from ..checkpoint.weights import model_fingerprint  # lazy: reads the checkpoint's files

    manifest = {"model content": model_fingerprint(cfg.model), "backend": cfg.backend, **cfg.resume_key(),
                **readout.manifest()}  # fmt: skip
    entry = {"id": name, "object": "model", "owned_by": "openjev-batch", "path": str(clf.model),
             "backend": clf.backend_name, "manifest": manifest, "releases": releases()}  # fmt: skip
    return {"object": "list", "data": [entry]}


def releases() -> dict[str, str]:
    """openjev-batch's release and that of each backend's package installed here (the engine's: sglang's)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"openjev-batch": __version__}
    for name in BACKEND_NAMES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # hf runs on transformers, named in the manifest's model content
            pass
    return out


def serve(clf: Any, cfg: Any, readouts: Readouts, limits: Limits, host: str, port: int, name: str,
          stop: Stop, say: Callable[[str], None]) -> int:  # fmt: skip
    """Serve until stopped. Returns the exit code (143 / 130 after a drain). Raises BackendError when the
    engine dies, ConfigError when the address cannot be listened on."""
    import uvicorn

    service = Service(clf, readouts.own, cfg, limits)
    app = make_app(service, readouts, limits, models_info(name, clf, cfg, readouts.shared or readouts.own),
                   lambda: stop.signum is not None)  # fmt: skip
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=int(limits.timeout_s) + 5)  # fmt: skip
    server = uvicorn.Server(config)
    stop.server = server
    if stop.signum is not None:  # stopped while the model loaded
        return stop.code or EXIT_TERMINATED
    http = threading.Thread(target=server.run, name="openjev-serve-http", daemon=True)
    service.start()
    http.start()
    while not server.started and http.is_alive():
        time.sleep(0.02)
    if not server.started:
        raise ConfigError(f"cannot listen on {host}:{port} (in use, or not an address of this machine?)")
    say(
        f"serving {name} ({clf.backend_name}) on http://{host}:{port}  POST /v1/systemone · GET /health · GET /v1/models"
    )
    try:
        service.serve_until(lambda: not http.is_alive())
    except BackendError:
        server.should_exit = True
        http.join(10)
        raise
    http.join()
    return stop.code or 0
