"""The API's own description, as the seed's server (FastAPI) serves it: `GET /openapi.json`, an OpenAPI 3.1
document of the seed's routes whose schemas are the pydantic models the server validates and answers with
(seed.py; the GET routes' below), so a client generator or a tool that reads the schema sees what the server
checks; `GET /docs` (Swagger UI) and `GET /` (Scalar's reference), pages that load their script from a CDN in
the reader's browser and the document from this server: the server itself fetches nothing.

The product's own routes (`/v1/records`, `/v1/manifest`, `/v1/status`) are left out, as the seed's pages and
its schema leave out what is not the seed's API; README "Serving" describes them."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from . import seed


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HealthResponse(Closed):
    status: Literal["ok", "unavailable"]
    startup_seconds: float | None = None


class LiveResponse(Closed):
    status: Literal["ok"] = "ok"


class ModelEntry(Closed):
    name: str
    description: str
    release_date: str = Field(description="The catalogue entry's date (YYYY-MM-DD), not the model's release.")


class OpenAIModelEntry(Closed):
    id: str
    object: Literal["model"] = "model"
    owned_by: str


class ModelsResponse(Closed):
    models: list[ModelEntry]
    object: Literal["list"] = "list"
    data: list[OpenAIModelEntry]


class LimitsResponse(Closed):
    max_answers_per_question: int
    max_questions: int
    max_body_bytes: int
    max_input_tokens: int = Field(description="Most tokens a question branch holds, its one output token included.")
    max_total_input_tokens: int = Field(description="Most tokens a request submits: the warm-up and every branch.")
    max_concurrent_requests: int
    max_images: int


class ErrorDetail(Closed):
    message: str


class ErrorResponse(Closed):
    error: ErrorDetail


class ValidationError(BaseModel):  # FastAPI's item: type, loc, msg, input (ctx where pydantic gives one)
    type: str
    loc: list[str | int]
    msg: str
    input: JsonValue = None
    ctx: dict[str, JsonValue] | None = None


class HTTPValidationError(Closed):
    detail: list[ValidationError]


MODELS: list[tuple[type[BaseModel], Literal["validation", "serialization"]]] = [
    (seed.SystemOneRequest, "validation"), (seed.SystemOneResponse, "serialization"),
    (ModelsResponse, "serialization"), (LimitsResponse, "serialization"), (HealthResponse, "serialization"),
    (LiveResponse, "serialization"), (ErrorResponse, "serialization"), (HTTPValidationError, "serialization"),
]  # fmt: skip
REFUSALS = {
    "401": "Missing or invalid API key (a server started with --api-key).",
    "413": "Request body is too large.",
    "499": "The client closed its connection.",
    "502": "The engine failed on a question.",
    "503": "The engine has stopped.",
    "504": "Evaluation deadline exceeded.",
    "529": "Server is at capacity; retry after Retry-After seconds.",
}
HEADERS = {
    "x-openjev-prefix-tokens": "Tokens of the prefix the questions share.",
    "x-openjev-cached-tokens": "Prompt tokens the branches found cached: at least the prefix each.",
    "x-openjev-model": "The model id this server serves.",
    "x-typesafe-request-id": "A new id for each answer.",
    "Server-Timing": "prepare, prefill and branches, in ms.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _get(summary: str, tag: str, model: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    responses = {"200": _json("OK", _ref(model)), **(extra or {})}
    return {"get": {"tags": [tag], "summary": summary, "responses": responses}}


@cache
def document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the seed's routes (`version`: the product's release)."""
    from pydantic.json_schema import models_json_schema  # lazy: only a client asking for the schema pays it

    _, top = models_json_schema(MODELS, ref_template="#/components/schemas/{model}")
    refused = {code: _json(why, _ref("ErrorResponse")) for code, why in REFUSALS.items()}
    invalid = _json("A body the schema refuses (FastAPI's `detail` list), an unknown model or a token limit.",
                    {"anyOf": [_ref("HTTPValidationError"), _ref("ErrorResponse")]})  # fmt: skip
    answer = _json("The typed answers, keyed as the questions.", _ref("SystemOneResponse"))
    answer["headers"] = {name: {"description": why, "schema": {"type": "string"}} for name, why in HEADERS.items()}
    systemone = {"post": {
        "tags": ["SystemOne"], "summary": "Evaluate questions", "operationId": "systemone",
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("SystemOneRequest")}}},
        "responses": {"200": answer, "422": invalid, **refused},
    }}  # fmt: skip
    unavailable = {"503": _json("The engine has stopped, or the server drains.", _ref("HealthResponse"))}
    return {
        "openapi": "3.1.0",
        "info": {"title": "OpenJev", "version": version,
                 "description": "The seed's (openjev-sglang) `/v1/systemone` API, served by openjev-batch."},
        "paths": {
            "/v1/systemone": systemone,
            "/v1/models": _get("List available model names", "Models", "ModelsResponse"),
            "/v1/limits": _get("Get request and concurrency limits", "Limits", "LimitsResponse"),
            "/health": _get("Check inference readiness", "Health", "HealthResponse", unavailable),
            "/health/live": _get("Check API liveness", "Health", "LiveResponse"),
        },
        "components": {"schemas": top["$defs"]},
    }  # fmt: skip


SWAGGER = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>OpenJev API - Swagger UI</title>
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css"></head>
<body><div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui"});</script>
<noscript>The schema: <a href="/openapi.json">/openapi.json</a></noscript>
</body></html>
"""

REFERENCE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>OpenJev API Reference</title></head>
<body><div id="app"></div>
<script src="https://cdn.jsdelivr.net/npm/@scalar/api-reference"></script>
<script>Scalar.createApiReference("#app", {url: "/openapi.json"});</script>
<noscript>The schema: <a href="/openapi.json">/openapi.json</a></noscript>
</body></html>
"""
