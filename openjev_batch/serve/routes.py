"""The server's endpoints (`Endpoints.routes`), each a handler over the service held open:

    POST /v1/systemone   one row → its answers (response.py), at most `--max-concurrent` evaluated at once
                         (529 with Retry-After past it), `--timeout` seconds waited for (504)
    GET  /health         200 while the engine serves, 503 once it has stopped or the server drains
    GET  /v1/models      the model, its manifest hashes and the releases (app.models_info)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .limits import HTTPError, Limits
from .request import Readouts, read_body, read_row
from .response import answer_response, error_response
from .service import Service

BIG_BODY = 64 * 2**10  # bodies over this are parsed in a worker thread, off the event loop


class Endpoints:
    """The handlers over `service`; `models` is GET /v1/models's document, `draining` says whether the server
    stopped accepting (a signal came). The service admits and counts the requests in flight (`evaluate`)."""

    def __init__(self, service: Service, readouts: Readouts, limits: Limits, models: dict[str, Any],
                 draining: Callable[[], bool]) -> None:  # fmt: skip
        self.service, self.readouts, self.limits = service, readouts, limits
        self.models, self.draining = models, draining
        self.model_name = models["data"][0]["id"]

    def routes(self) -> list[Route]:
        return [
            Route("/v1/systemone", self.systemone, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
        ]

    async def systemone(self, request: Request) -> Response:
        t0 = time.perf_counter()
        limits = self.limits
        try:  # the body first, outside the slots: a client slow to send it holds none (408 past its limit)
            raw = await asyncio.wait_for(read_body(request, limits), limits.body_timeout_s)
        except asyncio.TimeoutError:
            return error_response(HTTPError(408, f"body: not sent within {limits.body_timeout_s:g} s"))
        except HTTPError as e:
            return error_response(e)
        except ClientDisconnect:  # the client left before its body arrived: nobody to answer
            return Response(status_code=400)
        try:  # parsed before admission: a malformed body is a 422 however full the server is, never a 529
            if len(raw) > BIG_BODY:
                row = await run_in_threadpool(read_row, raw, self.readouts, limits)
            else:
                row = read_row(raw, self.readouts, limits)
            t_parse = time.perf_counter() - t0
            got = await self.service.evaluate(row, gone=lambda: _left(request))  # admission (529), queue, 504
            return answer_response(row.id, got, t_parse, self.model_name)
        except HTTPError as e:
            return error_response(e)

    async def health(self, request: Request) -> Response:
        if self.service.dead is not None:
            return JSONResponse({"status": "dead", "why": self.service.dead}, status_code=503)
        if self.draining():
            return JSONResponse({"status": "draining"}, status_code=503)
        svc = self.service
        return JSONResponse({"status": "ok", "model": self.model_name, "in_flight": svc.in_flight,
                             "batches": svc.batches, "dropped": svc.dropped})  # fmt: skip

    async def list_models(self, request: Request) -> Response:
        return JSONResponse(self.models)


async def _left(request: Request) -> None:
    """Ends when the client has closed its connection (its body read, the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
