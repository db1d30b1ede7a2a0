"""What a request is answered with. The seed's route (seed.py has its schemas): `json_response` of its
response, `seed_error` for a refusal (`{"error": {"message": …}}`, the seed's words where it has them), and
`seed_headers` (x-openjev-prefix-tokens, x-openjev-cached-tokens, x-openjev-model, Server-Timing with the
seed's names: prepare, prefill, branches). The product's route: `error_response` (`{"error": {status, field,
message}}`) or `answer_response`: one record per question with the columns `run` writes, `usage`, the headers;
a record the engine failed makes it a 502 (limits and questions were checked before the model call)."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.responses import Response

from .limits import HTTPError
from .seed import error_body
from .service import Answer

# the seed's words for the refusals it has (openjev-sglang api.py / service.py); the others keep the product's
SEED_WORDS = {
    413: "Request body is too large",
    499: "Client disconnected",
    504: "Evaluation deadline exceeded",
    529: "Server is at capacity; retry shortly",
}
RETRY = (429, 503, 529)  # the seed sends Retry-After with these


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """`content` as compact JSON (the seed's serializer writes no spaces); text a client sent that UTF-8
    cannot encode (a lone surrogate quoted in a message) is escaped, and a NaN or ±inf (JSON has none) is
    written as a string: never a 500."""
    try:
        data = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except UnicodeEncodeError:
        data = json.dumps(content, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:  # a non-finite float (the body parser refuses them: this is the last guard)
        return json_response(_finite(content), status, headers)
    return Response(data, status_code=status, headers=headers, media_type="application/json")


def seed_error(e: HTTPError) -> Response:
    """A refusal on the seed's route, in the seed's shape and words, Retry-After where the seed sends it."""
    headers = dict(e.headers)
    if e.status in RETRY:
        headers.setdefault("Retry-After", "1")
    return json_response(error_body(SEED_WORDS.get(e.status, e.message)), e.status, headers)


def unrowed(message: str, row_id: Any) -> str:
    """A record's error as an HTTP client reads it: without the batch job's `row <id>: ` prefix (a request is
    one row, so `row 0:` named nothing the client sent). The record's own `error` column keeps it, as `run`'s."""
    head = f"row {row_id}: "
    return message[len(head) :] if message.startswith(head) else message


def seed_headers(got: Answer, t_parse: float, served: str) -> dict[str, str]:
    """The seed's response headers of an answer (`t_parse`: seconds its body took to read and parse)."""
    t = got.timing
    prepare = t_parse + t.get("prep", 0.0) + t.get("queue", 0.0)
    return {
        "x-openjev-prefix-tokens": str(got.prefix_tokens),
        "x-openjev-cached-tokens": str(seed_cached(got)),
        "x-openjev-model": served,
        "Server-Timing": f"prepare;dur={prepare * 1000:.2f}, prefill;dur={t.get('prefill', 0.0) * 1000:.2f}, "
        f"branches;dur={t.get('branches', 0.0) * 1000:.2f}",
    }


def seed_cached(got: Answer) -> int:
    """x-openjev-cached-tokens as the seed counts it: the cache hits its engine reports for the branches, which
    its warm-up pass ran after, so each branch finds at least the shared prefix cached (N × prefix for N
    questions; a deeper hit as reported). The product's engines count the prefix pass in the branch that ran it
    (hf: a prefix's first branch reports 0, so the records sum (N − 1) × prefix); `usage` counts that pass as
    the warm-up, as the seed does, so here each branch is credited the prefix too."""
    return sum(max(r.get("cached_tokens") or 0, got.prefix_tokens) for r in got.records)


def error_response(e: HTTPError) -> Response:
    """The error in the product's shape (POST /v1/records)."""
    return json_response(e.body(), e.status, e.headers)


def answer_response(row_id: str, got: Answer, t_parse: float, model_name: str) -> Response:
    """The answers of row `row_id` (`t_parse`: seconds its body took to read and parse)."""
    records = [{k: clean(v) for k, v in r.items()} for r in got.records]
    cached = sum(r["cached_tokens"] or 0 for r in records)
    usage = {"input_tokens": sum(r["branch_tokens"] or 0 for r in records), "cached_tokens": cached,
             "output_tokens": 0}  # fmt: skip
    headers = {"x-openjev-prefix-tokens": str(got.prefix_tokens), "x-openjev-cached-tokens": str(cached),
               "x-openjev-model": model_name, "Server-Timing": server_timing(t_parse, got.timing)}  # fmt: skip
    failed = [unrowed(r["error"], r["id"]) for r in records if r["error"]]
    body: dict[str, Any] = {"id": row_id, "model": model_name, "answers": records, "usage": usage}
    if failed:  # limits and questions were checked before: what fails now is the engine
        body["error"] = {"status": 502, "field": None, "message": failed[0]}
    return json_response(body, 502 if failed else 200, headers)


def clean(v: Any) -> Any:
    """A record value as JSON has it: NaN and ±inf (never in an answered record) as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v


def _finite(v: Any) -> Any:
    """`v` with every NaN and ±inf as its name, in dicts, lists and tuples."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def server_timing(t_parse: float, t: dict[str, float]) -> str:
    """The product route's Server-Timing header: prompt preparation (the body's parse included), the wait
    for the engine, the shared prefill and the branches, in ms."""
    return ", ".join(
        f'{name};dur={ms * 1000:.3f};desc="{desc}"'
        for name, ms, desc in (
            ("prep", t_parse + t.get("prep", 0.0), "prompt preparation"),
            ("queue", t.get("queue", 0.0), "waiting for the engine"),
            ("prefill", t.get("prefill", 0.0), "shared prefill"),
            ("branches", t.get("branches", 0.0), "branch inference"),
        )
    )
