"""The optional bearer key (`serve --api-key`, or OPENJEV_API_KEY as the seed names it): every request but the
health checks must carry `Authorization: Bearer <key>` (the scheme in any case: RFC 7235), else 401 in the seed's
shape, before its body is read. A health path with a trailing slash is a health check too (the app redirects it,
as the seed's FastAPI does), not a 401."""

from __future__ import annotations

import json
import secrets
from typing import Any

OPEN_PATHS = frozenset({"/health", "/health/live"})  # an orchestrator's probes carry no key
REFUSAL = json.dumps({"error": {"message": "Missing or invalid API key"}}).encode()


class BearerKey:
    """ASGI middleware over `app`: a request without the key is refused 401 (`WWW-Authenticate: Bearer`)."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.expected = app, key.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        scheme, _, given = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
        # constant time: the key is not guessed by timing
        if scheme.lower() == b"bearer" and secrets.compare_digest(given, self.expected):
            return await self.app(scope, receive, send)
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(REFUSAL)).encode()),
            (b"www-authenticate", b"Bearer")]})  # fmt: skip
        await send({"type": "http.response.body", "body": REFUSAL})
