"""A request body's JSON (serve/request.py `loads`, both routes): NaN, Infinity, -Infinity and a number past the
float range are not JSON and are refused 422 in each route's shape, never a 500 (hostile trial items 2 and 3:
a NaN echoed in the seed route's 422 made `json_response` raise, a text/plain 500; a NaN inside the state was
shown to the model). Held against the real `openjev-batch serve`."""

from __future__ import annotations

import json
import math

import pytest
from serve_process import Server

from openjev_batch.serve.response import json_response

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HEAD = '{"model":"jev-latest","state":"x","questions":'
NON_FINITE = [  # the trial's bodies, each a 500 before
    HEAD + '{"r":{"type":"score","criteria":[-Infinity,1]}}}',
    HEAD + '{"r":{"type":"choice","criteria":{"a":NaN,"b":null}}}}',
    '{"model":"jev-latest","state":NaN,"questions":{"r":{"type":"noul"}}}',
    '{"model":NaN,"state":"x","questions":{"r":{"type":"noul"}}}',
    "1e999",
    '{"model":"jev-latest","state":{"a":NaN},"questions":{"r":{"type":"noul"}}}',  # item 3: accepted before
    '{"model":"jev-latest","state":"x","questions":{"r":{"type":"noul","instructions":{"a":Infinity}}}}',
    '{"model":"jev-latest","state":{"a":-1e400},"questions":{"r":{"type":"noul"}}}',
]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("request"), "-m", str(tiny_model), "-b", "hf", "--api-key", KEY)
    yield s
    assert s.stop() == 143, s.log
    assert "Traceback" not in s.log, s.log


@pytest.mark.parametrize("body", NON_FINITE, ids=[f"body{i}" for i in range(len(NON_FINITE))])
def test_non_finite_numbers_are_a_422_on_the_seed_route(server, body):
    r = server.post(body.encode(), path="/v1/systemone", headers=AUTH)
    assert r.status_code == 422, r.text[:300]
    item = r.json()["detail"][0]  # FastAPI's shape, as a malformed body's
    assert (item["type"], item["msg"]) == ("json_invalid", "JSON decode error"), item
    assert "Infinity" in item["ctx"]["error"] or "NaN" in item["ctx"]["error"] or "float range" in item["ctx"]["error"]


@pytest.mark.parametrize("body", NON_FINITE, ids=[f"body{i}" for i in range(len(NON_FINITE))])
def test_non_finite_numbers_are_a_422_on_the_records_route(server, body):
    body = body.replace('"model":NaN', '"id":NaN').replace('"model":"jev-latest",', "")  # the product's row body
    r = server.post(body.encode(), headers=AUTH)
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert err["status"] == 422 and err["message"].startswith("body: "), err
    assert "not a JSON number" in err["message"] or "past the float range" in err["message"], err


def test_finite_numbers_are_still_answered(server):
    body = '{"model":"jev-latest","state":{"a":1.5e3,"b":-2.25,"c":1e308},"questions":{"r":{"type":"noul"}}}'
    r = server.post(body.encode(), path="/v1/systemone", headers=AUTH)
    assert r.status_code == 200, r.text[:300]
    assert 0 <= r.json()["answers"]["r"]["noul"] <= 1


def test_json_response_never_fails_on_a_non_finite_float():
    r = json_response({"detail": [{"input": [float("-inf"), 1.0, math.nan]}], "x": (float("inf"),)}, 422)
    assert r.status_code == 422
    assert json.loads(r.body) == {"detail": [{"input": ["-Infinity", 1.0, "NaN"]}], "x": ["Infinity"]}
