"""The server's endpoints (`Endpoints.routes`), each a handler over the service held open. The seed's API
(openjev-sglang; its schemas and words: seed.py):

    POST /v1/systemone   a seed request → `{model, answers, usage}`, headers x-openjev-prefix-tokens,
                         x-openjev-cached-tokens, x-openjev-model, x-typesafe-request-id, Server-Timing
    GET  /v1/models      the names a request may give (`jev-latest`, the served id), catalogue + OpenAI shapes
    GET  /v1/limits      the admission limits
    GET  /health         200 `{status: ok, startup_seconds}` while the engine serves; 503 (Retry-After) once it
                         has stopped or the server drains
    GET  /health/live    200 while the HTTP side runs
    GET  /openapi.json   the OpenAPI 3.1 document of these routes (openapi.py); GET /docs (Swagger UI) and GET /
                         (Scalar's reference) read it

The product's own, beside it:

    POST /v1/records     one row (`id`, `state` or `messages`, `questions`) → the records `run` writes for it
                         (label mass, token counts, `chosen`, calibration's `abstain`, …)
    GET  /v1/manifest    the model, its manifest hashes (the `--resume` key's) and the releases
    GET  /v1/status      the engine's state, requests in flight, batches scored

Both POST routes read the body first, outside the slots (a client slow to send it holds none: 408 past
`--body-timeout`), parse it before admission (a malformed body is a 422 even on a full server), then take
one of `--max-concurrent` slots (529 with Retry-After past them) and wait `--timeout` seconds (504).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from .._version import __version__
from ..readouts.base import FieldError
from . import image_urls, openapi, seed
from .limits import HTTPError, Limits
from .request import body_row, parse_body, read_body
from .response import answer_response, error_response, json_response, seed_error, seed_headers, unrowed
from .service import Answer, Service

BIG_BODY = 64 * 2**10  # bodies over this are parsed in a worker thread, off the event loop


@dataclass(frozen=True)
class Facts:
    """What the endpoints tell of the server: `names` the model names it lists (`jev-latest`, the served
    id), `accepted` every name a request may give besides a `jev-*` alias (also the `-m` name), `served` the
    served id, `manifest` GET /v1/manifest's document, `startup_s` the seconds start-up took, `max_images` the
    images a request's state may hold (0: the model takes none), `image_urls` whether http(s) images are
    fetched."""

    names: tuple[str, ...]
    accepted: tuple[str, ...]
    served: str
    manifest: dict[str, Any]
    startup_s: float
    max_images: int = 0
    image_urls: bool = False  # --allow-image-urls: http(s) images fetched here (image_urls.py), not refused


class Endpoints:
    """The handlers over `service`; `draining` says whether the server stopped accepting (a signal came). The
    service admits and counts the requests in flight (`evaluate`)."""

    def __init__(self, service: Service, limits: Limits, facts: Facts, draining: Callable[[], bool]) -> None:
        self.service, self.reader, self.limits = service, service.reader, limits
        self.facts, self.draining = facts, draining

    def routes(self) -> list[Route]:
        return [
            Route("/v1/systemone", self.systemone, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/limits", self.limits_doc, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/health/live", self.live, methods=["GET"]),
            Route("/v1/records", self.records, methods=["POST"]),
            Route("/v1/manifest", self.manifest, methods=["GET"]),
            Route("/v1/status", self.status, methods=["GET"]),
            Route("/openapi.json", self.schema, methods=["GET"]),
            Route("/docs", self.page(openapi.SWAGGER), methods=["GET"]),
            Route("/", self.page(openapi.REFERENCE), methods=["GET"]),
        ]

    async def _body(self, request: Request) -> bytes:
        """The body's bytes. Raises HTTPError (413, 408; 400 when the client left before sending it)."""
        limits = self.limits
        try:
            return await asyncio.wait_for(read_body(request, limits), limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise HTTPError(408, f"body: not sent within {limits.body_timeout_s:g} s") from None
        except ClientDisconnect:  # the client left before its body arrived: nobody reads the answer
            raise HTTPError(400, "body: the client left before sending it") from None

    def _row(self, body: dict[str, Any], seed: bool = False) -> Any:
        """The served readout's row of a parsed body (`seed`: the seed route's, read by the seed's rules), its
        http(s) images fetched first where the operator opted in. Raises HTTPError 422."""
        if self.facts.image_urls:
            try:
                body = image_urls.inline(body)
            except FieldError as e:
                raise HTTPError(422, e.message, e.field) from None
        return body_row(body, self.reader, self.limits, seed)

    async def _evaluate(self, row: Any, request: Request) -> Answer:
        """`row` answered by the engine: admission (529), the queue, 504, dropped if the client leaves.
        Raises HTTPError."""
        return await self.service.evaluate(row, gone=lambda: _left(request))

    async def systemone(self, request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            raw = await self._body(request)
        except HTTPError as e:
            return seed_error(e)
        try:
            req = await run_in_threadpool(seed.parse, raw) if len(raw) > BIG_BODY else seed.parse(raw)
        except seed.Invalid as e:
            return json_response(e.body(), e.status)
        if not seed.known_model(req.model, self.facts.accepted):
            return json_response(seed.error_body(seed.unknown_model(req.model)), 422)
        try:
            row = await run_in_threadpool(self._row, seed.row_body(req), True)
            t_parse = time.perf_counter() - t0
            got = await self._evaluate(row, request)
        except HTTPError as e:
            return seed_error(e)
        failed = [unrowed(r["error"], r.get("id")) for r in got.records if r.get("error")]
        if failed:  # limits and questions were checked before: what fails now is the engine
            return seed_error(HTTPError(502, failed[0]))
        out = seed.response(req, got.records, got.prefix_tokens)
        headers = seed_headers(got, t_parse, self.facts.served)
        headers["x-typesafe-request-id"] = uuid.uuid4().hex
        return json_response(out.model_dump(), 200, headers)

    async def records(self, request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            raw = await self._body(request)
            if len(raw) > BIG_BODY or self.facts.image_urls:  # off the event loop: a big parse, a fetch
                row = await run_in_threadpool(lambda: self._row(parse_body(raw)))
            else:
                row = self._row(parse_body(raw))
            t_parse = time.perf_counter() - t0
            got = await self._evaluate(row, request)
            return answer_response(row.id, got, t_parse, self.facts.served)
        except HTTPError as e:
            return error_response(e)

    async def schema(self, request: Request) -> Response:
        return json_response(openapi.document(__version__))

    @staticmethod
    def page(html: str) -> Callable[[Request], Any]:
        async def handler(request: Request) -> Response:
            return HTMLResponse(html)

        return handler

    async def models(self, request: Request) -> Response:
        return json_response(seed.models(self.facts.names, self.facts.served))

    async def limits_doc(self, request: Request) -> Response:
        lim = self.limits
        return json_response({
            "max_answers_per_question": lim.max_options, "max_questions": lim.max_questions,
            "max_body_bytes": lim.max_body_bytes, "max_input_tokens": lim.max_branch_tokens,
            "max_total_input_tokens": lim.max_request_tokens, "max_concurrent_requests": lim.max_concurrent,
            "max_images": self.facts.max_images,
        })  # fmt: skip

    def _unavailable(self) -> str | None:
        if self.service.dead is not None:
            return f"the engine has stopped: {self.service.dead}"
        return "the server is draining" if self.draining() else None

    async def health(self, request: Request) -> Response:
        down = self._unavailable() is not None
        body = {"status": "unavailable" if down else "ok", "startup_seconds": self.facts.startup_s}
        headers = {"Retry-After": str(self.limits.retry_after_s)} if down else None
        return json_response(body, 503 if down else 200, headers)

    async def live(self, request: Request) -> Response:
        return json_response({"status": "ok"})

    async def manifest(self, request: Request) -> Response:
        return JSONResponse(self.facts.manifest)

    async def status(self, request: Request) -> Response:
        if self.service.dead is not None:
            return JSONResponse({"status": "dead", "why": self.service.dead}, status_code=503)
        if self.draining():
            return JSONResponse({"status": "draining"}, status_code=503)
        svc = self.service
        return JSONResponse({"status": "ok", "model": self.facts.served, "in_flight": svc.in_flight,
                             "batches": svc.batches, "dropped": svc.dropped,
                             "queued_tokens": svc.ahead.total()[0]})  # fmt: skip


async def _left(request: Request) -> None:
    """Ends when the client has closed its connection (its body read, the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
