"""A request body's bytes (`read_body`, within `--max-body-bytes`: 413) and, for the product's own route
(POST /v1/records), the body → the served readout's row: parsed as a JSONL line is (UTF-8, a JSON object, no key
given twice), then read by the readout's own request reader (`Readout.Request`: label-logprobs' is
readouts/label_logprobs/request.py), whose FieldError becomes a 422 naming the field. The seed's route reads
its body by the seed's schema first (seed.py), then hands the same reader the row body it makes."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ..readouts.base import FieldError, RequestReader
from ..values import no_duplicate_keys
from .limits import HTTPError, Limits

if TYPE_CHECKING:
    from starlette.requests import Request


async def read_body(request: Request, limits: Limits) -> bytes:
    """The body's bytes, no more than `limits.max_body_bytes` read (a larger declared length refused before
    any is). Raises HTTPError 413."""
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


def body_row(body: dict[str, Any], reader: RequestReader, limits: Limits, seed: bool = False) -> Any:
    """The reader's row of a parsed body (`seed`: a body the seed's route made, read by the seed's rules).
    Raises HTTPError 422 naming the field."""
    try:
        return (reader.seed_row if seed else reader.row)(body, limits.counts())
    except FieldError as e:
        raise HTTPError(422, e.message, e.field) from None
    except RecursionError:
        raise HTTPError(422, "body: nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - a body the reader did not foresee: its one line, not a traceback
        raise HTTPError(
            422, f"body: cannot be read as a row: {type(e).__name__}: {str(e)[:300]}"
        ) from None


def loads(text: str | bytes) -> Any:
    """JSON text as Python, stricter than json.loads: a key given twice is refused (which `role` would a message
    have?), and so are NaN, Infinity and -Infinity (not JSON: RFC 8259 has no such number; json.loads takes them,
    and a NaN echoed in a 422 made it a 500) and a number past the float range (1e999: inf). Both routes read
    their bodies here. Raises json.JSONDecodeError, ValueError, RecursionError."""
    return json.loads(text, object_pairs_hook=no_duplicate_keys, parse_constant=_no_constant,
                      parse_float=_finite_float)  # fmt: skip


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is past the float range")
    return value


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, read as a JSONL line is. Raises HTTPError 422."""
    try:
        body = loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise HTTPError(422, f"body: not valid UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise HTTPError(422, f"body: malformed JSON ({e.msg} at char {e.pos})") from None
    except RecursionError:  # json's C decoder recurses once per level
        raise HTTPError(422, "body: JSON nested too deeply") from None
    except ValueError as e:  # a key twice; an integer past Python's 4,300-digit parse limit
        if "digits" in str(e):  # not Python's advice to the server's operator
            raise HTTPError(422, "body: a number over 4,300 digits") from None
        raise HTTPError(422, f"body: {e}") from None
    if not isinstance(body, dict):
        raise HTTPError(422, f"body: expected a JSON object, got {type(body).__name__}")
    return body
