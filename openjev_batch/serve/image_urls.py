"""`serve --allow-image-urls`: the seed lets a client name an image by `http(s)://` URL, which its engine
fetches. A server that fetches what a client names is an SSRF hole (the cloud's metadata address, every
internal service beside the server, reached on the client's behalf), so this server refuses such a URL (422)
unless its operator opts in. Opted in, each such image is fetched here, before the row is read, and given to
the readout inline as a `data:` URL: at most MAX_IMAGE_BYTES, within FETCH_TIMEOUT_S, an `image/*` answer only,
no redirect followed (a redirect could lead from a public name to an internal address). The readout's own
image checks (format, pixels, count) then apply as to any inline image."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from typing import Any

from ..images import MAX_IMAGE_BYTES
from ..readouts.base import FieldError

FETCH_TIMEOUT_S = 10.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None  # the 3xx is then an HTTPError: refused


def inline(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with every `http(s)` image of its messages (`messages`, or `state` as a message list or
    `{"messages": [...]}`) fetched and made a `data:` URL. Raises FieldError naming the part."""
    for key in ("messages", "state"):
        msgs = body.get(key)
        msgs = msgs.get("messages") if isinstance(msgs, dict) else msgs
        if not isinstance(msgs, list):
            continue
        for i, m in enumerate(msgs):
            parts = m.get("content") if isinstance(m, dict) else None
            for j, part in enumerate(parts if isinstance(parts, list) else ()):
                if isinstance(part, dict):
                    _inline_part(part, f"{key}[{i}].content[{j}]")
    return body


def _inline_part(part: dict[str, Any], where: str) -> None:
    holder: Any = part
    name = "image"
    if part.get("type") == "image_url":
        holder, name = (part["image_url"], "url") if isinstance(part.get("image_url"), dict) else (part, "image_url")
    url = holder.get(name)
    if isinstance(url, str) and url.lower().startswith(("http://", "https://")):
        holder[name] = fetch(url, f"{where}.{'image_url' if part.get('type') == 'image_url' else 'image'}")


def fetch(url: str, field: str) -> str:
    """The image at `url` as a `data:` URL. Raises FieldError (unreachable, not an image, too large)."""
    opener = urllib.request.build_opener(_NoRedirect)
    req = urllib.request.Request(url, headers={"User-Agent": "openjev-batch"})
    try:
        with opener.open(req, timeout=FETCH_TIMEOUT_S) as r:
            kind = (r.headers.get_content_type() or "").lower()
            data = r.read(MAX_IMAGE_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", None) or e
        raise FieldError(f"{field}: cannot fetch the image: {str(why)[:200]}", field) from None
    if not kind.startswith("image/"):
        raise FieldError(f"{field}: the URL answered {kind or 'no content type'}, not an image", field)
    if len(data) > MAX_IMAGE_BYTES:
        raise FieldError(f"{field}: the image is over {MAX_IMAGE_BYTES:,} bytes", field)
    return f"data:{kind};base64,{base64.b64encode(data).decode()}"
