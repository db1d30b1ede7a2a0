"""The optional bearer key (`serve --api-key`, or OPENJEV_API_KEY as the seed names it): every request but the
health checks must carry `Authorization: Bearer <key>`, else 401 in the seed's shape, before its body is read."""

from __future__ import annotations

import json
import secrets
from typing import Any

OPEN_PATHS = frozenset({"/health", "/health/live"})  # an orchestrator's probes carry no key
REFUSAL = json.dumps({"error": {"message": "Missing or invalid API key"}}).encode()


class BearerKey:
    """ASGI middleware over `app`: a request without the key is refused 401 (`WWW-Authenticate: Bearer`)."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = dict(scope["headers"]).get(b"authorization", b"")
        if secrets.compare_digest(given, self.expected):  # constant time: the key is not guessed by timing
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(REFUSAL)).encode()),
            (b"www-authenticate", b"Bearer")]})  # fmt: skip
        await send({"type": "http.response.body", "body": REFUSAL})
