"""The bearer key (serve/auth.py) over a real Starlette app through Starlette's test client: the scheme is
case-insensitive (RFC 7235; hostile trial item 8: `bearer KEY` got 401), a malformed header or a wrong key is
401, and a health path with a trailing slash is a health check, not a 401 (item 9)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from openjev_batch.serve.auth import BearerKey


async def ok(request):
    return JSONResponse({"path": request.url.path})


@pytest.fixture(scope="module")
def client():
    app = Starlette(routes=[Route(p, ok) for p in ("/health", "/health/live", "/v1/models")])
    return TestClient(BearerKey(app, "sekret"))


@pytest.mark.parametrize("header", ["Bearer sekret", "bearer sekret", "BEARER sekret", "bEaReR sekret"])
def test_the_scheme_is_case_insensitive(client, header):
    r = client.get("/v1/models", headers={"Authorization": header})
    assert r.status_code == 200 and r.json() == {"path": "/v1/models"}


@pytest.mark.parametrize("header", [None, "Bearer wrong", "Bearersekret", "Bearer  sekret", "Basic sekret",
                                    "sekret", "Bearer sekret2", "Bearer "])  # fmt: skip
def test_no_key_a_wrong_key_or_a_malformed_header_is_401(client, header):
    r = client.get("/v1/models", headers={"Authorization": header} if header else {})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert r.json() == {"error": {"message": "Missing or invalid API key"}}


@pytest.mark.parametrize("path,to", [("/health", "/health"), ("/health/", "/health"),
                                     ("/health/live", "/health/live"), ("/health/live/", "/health/live")])  # fmt: skip
def test_health_paths_need_no_key_with_or_without_a_trailing_slash(client, path, to):
    r = client.get(path)  # the app's redirect of the slashed path is followed
    assert r.status_code == 200 and r.json() == {"path": to}


def test_other_paths_with_a_trailing_slash_still_need_the_key(client):
    assert client.get("/v1/models/", follow_redirects=False).status_code == 401
    assert client.get("/health/x").status_code == 401
