"""What a request is answered with: an error's status and JSON body (`error_response`), or the row's answers
(`answer_response`): one record per question with the columns `run` writes, `usage`, the headers
x-openjev-prefix-tokens, x-openjev-cached-tokens and Server-Timing (`server_timing`); a record the engine
failed makes it a 502 (limits and questions were checked before the model call)."""

from __future__ import annotations

import json

from starlette.responses import Response

from .limits import HTTPError
from .service import Answer, clean


def error_response(e: HTTPError) -> Response:
    """The error as JSON; text a client sent that UTF-8 cannot encode (a lone surrogate quoted in a message)
    is escaped, never a 500."""
    try:
        content = json.dumps(e.body(), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        content = json.dumps(e.body()).encode()
    return Response(content, status_code=e.status, headers=e.headers, media_type="application/json")


def answer_response(row_id: str, got: Answer, t_parse: float, model_name: str) -> Response:
    """The answers of row `row_id` (`t_parse`: seconds its body took to read and parse)."""
    records = [{k: clean(v) for k, v in r.items()} for r in got.records]
    cached = sum(r["cached_tokens"] or 0 for r in records)
    usage = {"input_tokens": sum(r["branch_tokens"] or 0 for r in records), "cached_tokens": cached,
             "output_tokens": 0}  # fmt: skip
    headers = {"x-openjev-prefix-tokens": str(got.prefix_tokens), "x-openjev-cached-tokens": str(cached),
               "Server-Timing": server_timing(t_parse, got.timing)}  # fmt: skip
    failed = [r["error"] for r in records if r["error"]]
    body = {"id": row_id, "model": model_name, "answers": records, "usage": usage}
    if failed:  # limits and questions were checked before: what fails now is the engine
        body["error"] = {"status": 502, "field": None, "message": failed[0]}
    content = json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
    return Response(
        content, status_code=502 if failed else 200, headers=headers, media_type="application/json"
    )


def server_timing(t_parse: float, t: dict[str, float]) -> str:
    """The Server-Timing header: prompt preparation (the body's parse included), the wait for the engine, the
    shared prefill and the branches, in ms."""
    return ", ".join(
        f'{name};dur={ms * 1000:.3f};desc="{desc}"'
        for name, ms, desc in (
            ("prep", t_parse + t.get("prep", 0.0), "prompt preparation"),
            ("queue", t.get("queue", 0.0), "waiting for the engine"),
            ("prefill", t.get("prefill", 0.0), "shared prefill"),
            ("branches", t.get("branches", 0.0), "branch inference"),
        )
    )
