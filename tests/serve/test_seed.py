"""The seed's contract (openjev-sglang: its README, `src/openjev/models.py`, `api.py`, `service.py`,
`tests/test_api.py`), held against the real `openjev-batch serve` on a free port through httpx: the seed's
response schemas written here as strict pydantic models (`extra="forbid"`, `strict=True`) parse every 200
response; the seed README's request body and the seed's own test cases are answered; every status code the
seed answers with (200, 401, 413, 422, 504, 529; 503 on /health) comes in the seed's shape; `usage` and the
token limits count as the seed counts them, checked against the product's own records of the same row."""

from __future__ import annotations

import json
import threading
import time
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from serve_process import Server, free_port, httpx, run_rows

from openjev_batch.readouts.label_logprobs.prompt_systemone import PREAMBLE

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SERVED = "tiny/served"
Content = str | dict[str, JsonValue] | list[JsonValue]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoulAnswer(Strict):
    type: Literal["noul"]
    noul: float = Field(ge=0, le=1)


class ChoiceAnswer(Strict):
    type: Literal["choice"]
    choice: str
    probabilities: dict[str, float]
    confidence: float = Field(ge=0, le=1)


class ScoreAnswer(Strict):
    type: Literal["score"]
    score: float = Field(ge=0)
    legend: dict[str, Content | None]
    probabilities: dict[str, float]
    confidence: float = Field(ge=0, le=1)


class Usage(Strict):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


Answer = Annotated[NoulAnswer | ChoiceAnswer | ScoreAnswer, Field(discriminator="type")]


class SystemOneResponse(Strict):
    model: str
    answers: dict[str, Answer]
    usage: Usage


class HealthResponse(Strict):
    status: Literal["ok", "unavailable"]
    startup_seconds: float | None = None


class LiveResponse(Strict):
    status: Literal["ok"]


class ModelEntry(Strict):
    name: str
    description: str
    release_date: str


class OpenAIModelEntry(Strict):
    id: str
    object: Literal["model"]
    owned_by: str


class ModelsResponse(Strict):
    models: list[ModelEntry]
    object: Literal["list"]
    data: list[OpenAIModelEntry]


class LimitsResponse(Strict):
    max_answers_per_question: int
    max_questions: int
    max_body_bytes: int
    max_input_tokens: int
    max_total_input_tokens: int
    max_concurrent_requests: int
    max_images: int


class ErrorDetail(Strict):
    message: str


class ErrorResponse(Strict):
    error: ErrorDetail


class ValidationItem(BaseModel):  # FastAPI's: type, loc, msg, input (and ctx where pydantic gives one)
    model_config = ConfigDict(extra="forbid")
    type: str
    loc: list[str | int]
    msg: str
    input: JsonValue
    ctx: dict[str, JsonValue] | None = None


class ValidationResponse(Strict):
    detail: list[ValidationItem]


# the seed README's request body, as its curl sends it
README_BODY = {
    "model": "jev-latest",
    "state": [
        {"role": "system", "content": "You are a support assistant."},
        {"role": "user", "content": "I was charged twice. Please refund the duplicate."},
    ],
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the user request a refund?"},
        "department": {"type": "choice", "instructions": "Which department should handle this?",
                       "criteria": {"billing": "Payments and refunds", "technical": "Software bugs"}},
        "urgency": {"type": "score", "instructions": "How urgent is the request?",
                    "criteria": ["Routine", "Urgent", "Emergency"]},
    },
}  # fmt: skip

# the seed's test payload (tests/conftest.py)
PAYLOAD = {
    "model": "jev-latest",
    "state": "I was charged twice, please refund.",
    "questions": {
        "yes": {"type": "noul", "instructions": "Refund?"},
        "team": {"type": "choice", "instructions": "Team?", "criteria": {"billing": "Payments", "technical": "Software"}},
        "level": {"type": "score", "instructions": "Urgency?", "criteria": ["Low", "Medium", "High"]},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def seed_server(tiny_model, tmp_path_factory):
    """The real command, its key from the seed's environment variable, its served id named."""
    s = Server(tmp_path_factory.mktemp("seed"), "-m", str(tiny_model), "-b", "hf", "--served-model-name", SERVED,
               env={"OPENJEV_API_KEY": KEY})  # fmt: skip
    yield s
    assert s.stop() == 143, s.log
    assert "Traceback" not in s.log, s.log


def post(server: Server, body, **kw) -> httpx.Response:
    return server.post(body, path="/v1/systemone", headers={**AUTH, **kw.pop("headers", {})}, **kw)


def answered(r: httpx.Response, body: dict) -> SystemOneResponse:
    """The 200 response parsed by the seed's strict schema, its answers keyed as the request's questions."""
    assert r.status_code == 200, r.text
    got = SystemOneResponse.model_validate(r.json())
    assert got.model == body["model"] and list(got.answers) == list(body["questions"])
    assert got.usage.output_tokens == len(body["questions"]) + 1  # one per question and the warm-up's
    for a in got.answers.values():
        if not isinstance(a, NoulAnswer):
            assert abs(sum(a.probabilities.values()) - 1) < 1e-9
    return got


def test_the_readme_request_answers_as_the_seed_counts(seed_server):
    r = post(seed_server, README_BODY)
    got = answered(r, README_BODY)
    assert set(got.answers["department"].probabilities) == {"billing", "technical"}
    score = got.answers["urgency"]
    assert isinstance(score, ScoreAnswer) and score.legend == {"0": "Routine", "1": "Urgent", "2": "Emergency"}
    assert score.score == pytest.approx(sum(int(i) * p for i, p in score.probabilities.items()))
    assert r.headers["x-openjev-model"] == SERVED and len(r.headers["x-typesafe-request-id"]) == 32
    timing = [part.split(";")[0] for part in r.headers["server-timing"].split(", ")]
    assert timing == ["prepare", "prefill", "branches"], r.headers["server-timing"]
    # the same row through the product's own route: its records carry the numbers and the token counts
    body = {"state": {"messages": README_BODY["state"]}, "questions": {
        "refund": {**README_BODY["questions"]["refund"], "criteria": {"true": "Yes", "false": "No"}},
        "department": README_BODY["questions"]["department"], "urgency": README_BODY["questions"]["urgency"]}}  # fmt: skip
    rec = seed_server.post(body, headers=AUTH)
    assert rec.status_code == 200, rec.text
    records = {a["question_id"]: a for a in rec.json()["answers"]}
    prefix = records["refund"]["prefix_tokens"]
    assert r.headers["x-openjev-prefix-tokens"] == str(prefix)
    # the warm-up's prompt (the prefix) and each branch's whole prompt, cache hits included
    assert got.usage.input_tokens == prefix + sum(a["branch_tokens"] for a in records.values())
    # the seed's cache hits: its warm-up ran first, so each of the N branches finds the prefix (seed test: 300 =
    # 3 × 100); hf's records count the pass in the first branch (0) and the prefix in the others
    assert r.headers["x-openjev-cached-tokens"] == str(3 * prefix)
    assert sorted(a["cached_tokens"] for a in records.values()) == [0, prefix, prefix]
    assert got.answers["refund"].noul == pytest.approx(records["refund"]["p_true"], abs=1e-9)
    dept = got.answers["department"]
    assert dept.choice == records["department"]["answer"]
    want = dict(zip(records["department"]["options"], records["department"]["probs"], strict=True))
    assert dept.probabilities == pytest.approx(want)
    assert dept.confidence == pytest.approx(records["department"]["confidence"])


@pytest.mark.parametrize("model", ["jev-latest", "jev-1.13.0", "jev-anything", "jev-2026.12_rc1", "jev-" + "9" * 96,
                                   SERVED, "{tiny}"])
def test_every_name_of_the_model_is_accepted_and_echoed(seed_server, tiny_model, model):
    body = {**PAYLOAD, "model": model.format(tiny=tiny_model)}
    answered(post(seed_server, body), body)


@pytest.mark.parametrize("model", ["jev-", "jev-latest ", " jev-latest", "jev-a b", "jev-" + "1" * 97, "jev-\u0000x"])
def test_a_loose_alias_is_an_unknown_model_and_a_long_one_is_not_echoed_whole(seed_server, model):
    """Attack trial: `jev-`, a trailing space and a 10 KB `jev-…` were accepted and echoed back whole."""
    r = post(seed_server, {**PAYLOAD, "model": model})
    msg = ErrorResponse.model_validate(r.json()).error.message
    assert r.status_code == 422 and msg.startswith("Unknown model: ") and len(msg) < 140, r.text[:300]
    r = post(seed_server, {**PAYLOAD, "model": "x" * 10_000})
    assert r.status_code == 422 and len(r.text) < 400, r.text[:300]


def test_the_catalogue_limits_and_health(seed_server):
    models = ModelsResponse.model_validate(httpx.get(seed_server.url + "/v1/models", headers=AUTH).json())
    assert [m.name for m in models.models] == [d.id for d in models.data] == ["jev-latest", SERVED]
    lim = LimitsResponse.model_validate(httpx.get(seed_server.url + "/v1/limits", headers=AUTH).json())
    assert (lim.max_answers_per_question, lim.max_questions, lim.max_input_tokens, lim.max_total_input_tokens,
            lim.max_body_bytes, lim.max_concurrent_requests) == (64, 64, 32_768, 262_144, 2 * 2**20, 16)  # fmt: skip
    assert lim.max_images == 0  # a text model
    health = httpx.get(seed_server.url + "/health")  # no key: an orchestrator's probe
    assert health.status_code == 200 and HealthResponse.model_validate(health.json()).startup_seconds > 0
    live = httpx.get(seed_server.url + "/health/live")
    assert live.status_code == 200 and LiveResponse.model_validate(live.json()).status == "ok"


def test_without_the_key_401(seed_server):
    for r in (seed_server.post(PAYLOAD, path="/v1/systemone"), httpx.get(seed_server.url + "/v1/models"),
              post(seed_server, PAYLOAD, headers={"Authorization": "Bearer wrong"})):  # fmt: skip
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert ErrorResponse.model_validate(r.json()).error.message == "Missing or invalid API key"


@pytest.mark.parametrize("count,status", [(1, 422), (2, 200), (64, 200), (65, 422)])
def test_answer_limits(seed_server, count, status):
    body = {"model": "jev-latest", "state": "test", "questions": {"q": {"type": "choice", "instructions": "pick",
            "criteria": {str(i): f"Option {i}" for i in range(count)}}}}  # fmt: skip
    r = post(seed_server, body)
    assert r.status_code == status, r.text[:300]
    if status == 200:
        assert len(answered(r, body).answers["q"].probabilities) == count
    else:
        assert ValidationResponse.model_validate(r.json()).detail[0].loc == ["body", "questions", "q", "choice", "criteria"]


INVALID = [
    ({"state": None}, ["body", "state", "str"]),
    ({"model": 1}, ["body", "model"]),
    ({"questions": {}}, ["body", "questions"]),
    ({"questions": {"q": {"type": "invalid", "instructions": "x"}}}, ["body", "questions", "q"]),
    ({"questions": {"q": {"type": "score", "instructions": "x", "criteria": ["one"]}}},
     ["body", "questions", "q", "score", "criteria"]),
    ({"questions": {str(i): {"type": "noul", "instructions": "x"} for i in range(65)}}, ["body", "questions"]),
    ({"id": "T1"}, ["body", "id"]),  # an unknown field: the seed's schema forbids extras
]  # fmt: skip


@pytest.mark.parametrize("change,loc", INVALID, ids=[f"invalid{i}" for i in range(len(INVALID))])
def test_invalid_requests_422_in_fastapis_shape(seed_server, change, loc):
    r = post(seed_server, PAYLOAD | change)
    assert r.status_code == 422, r.text[:300]
    assert ValidationResponse.model_validate(r.json()).detail[0].loc == loc, r.text[:300]


def test_missing_model_and_malformed_json(seed_server):
    r = post(seed_server, {k: v for k, v in PAYLOAD.items() if k != "model"})
    item = ValidationResponse.model_validate(r.json()).detail[0]
    assert r.status_code == 422 and (item.type, item.loc, item.msg) == ("missing", ["body", "model"], "Field required")
    r = post(seed_server, b"{not json")
    item = ValidationResponse.model_validate(r.json()).detail[0]
    assert r.status_code == 422 and (item.type, item.loc, item.msg) == ("json_invalid", ["body", 1], "JSON decode error")


def test_an_unknown_model_is_the_seeds_422(seed_server):
    r = post(seed_server, {**PAYLOAD, "model": "other"})
    assert r.status_code == 422
    assert ErrorResponse.model_validate(r.json()).error.message == "Unknown model: other"


@pytest.mark.parametrize("description", [None, ""])
def test_choice_accepts_nullable_descriptions(seed_server, description):
    body = json.loads(json.dumps(PAYLOAD))
    body["questions"]["team"]["criteria"]["technical"] = description
    assert answered(post(seed_server, body), body).answers["team"].probabilities.keys() == {"billing", "technical"}


def test_structured_criteria_and_instructions(seed_server):
    """The seed's case: criteria as JSON (noul's too), the score legend giving them back as sent; instructions
    as JSON; a noul question without criteria and one with null criteria (the keys stand in)."""
    score = [{"level": "Low"}, ["High", {"threshold": 10}]]
    body = {**PAYLOAD, "questions": {
        "binary": {"type": "noul", "criteria": {"true": {"meaning": "Match"}, "false": ["Different"]}},
        "choice": {"type": "choice", "criteria": {"object": {"meaning": "Object"}, "array": ["Array"]}},
        "score": {"type": "score", "criteria": score, "instructions": {"rubric": "urgency", "scale": [0, 1]}},
        "bare": {"type": "noul", "criteria": None, "instructions": None},
    }}  # fmt: skip
    got = answered(post(seed_server, body), body)
    assert got.answers["score"].legend == {"0": score[0], "1": score[1]}


def test_question_without_instructions_is_accepted(seed_server):
    body = json.loads(json.dumps(PAYLOAD))
    del body["questions"]["yes"]["instructions"]
    assert "yes" in answered(post(seed_server, body), body).answers


STATES = [
    # a message list with a tool turn (the seed keeps the roles; the question is one more user turn)
    [{"role": "system", "content": "You route tickets."},
     {"role": "user", "content": "Where is my parcel?"},
     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "track", "arguments": "{\"order\": 7}"}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "{\"status\": \"lost\"}"},
     {"role": "assistant", "content": "It was lost; I will refund you."}],
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Refund my duplicate charge."}]}]},
    {"ticket": "Charged twice", "plan": "pro", "messages": [{"role": "user", "content": "kept as data"}]},
    ["an", "array", {"of": "data"}],
    '[{"role": "user", "content": "a string that looks like a chat is text"}]',
]  # fmt: skip


@pytest.mark.parametrize("state", STATES, ids=["tool-turn", "envelope", "object-with-messages", "array", "text"])
def test_every_kind_of_state_is_answered(seed_server, state):
    body = {**PAYLOAD, "state": state}
    answered(post(seed_server, body), body)


def test_an_image_url_is_refused_unless_opted_in(seed_server):
    """A server that fetches what a client names is an SSRF hole: an http(s) image is a 422."""
    body = {**PAYLOAD, "state": [{"role": "user", "content": [
        {"type": "text", "text": "Is it signed?"},
        {"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest/meta-data/"}}]}]}  # fmt: skip
    r = post(seed_server, body)
    assert r.status_code == 422, r.text
    assert "data: URLs only" in ErrorResponse.model_validate(r.json()).error.message


def test_image_urls_fetched_only_when_opted_in(tiny_model, tmp_path):
    """`--allow-image-urls`: the server fetches the image itself (here from a port nobody listens on: the
    fetch's own refusal, naming the part, where the closed server said `data: URLs only`)."""

    s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "--allow-image-urls", "--layout", "transcript")
    try:
        url = f"http://127.0.0.1:{free_port()}/scan.png"
        body = {**PAYLOAD, "state": [{"role": "user", "content": [
            {"type": "text", "text": "Is it signed?"}, {"type": "image_url", "image_url": {"url": url}}]}]}  # fmt: skip
        r = s.post(body, path="/v1/systemone")
        assert r.status_code == 422, r.text
        msg = ErrorResponse.model_validate(r.json()).error.message
        assert msg.startswith("messages[0].content[1].image_url: cannot fetch the image"), msg
    finally:
        assert s.stop() == 143, s.log


def test_413_504_529_and_the_token_limits(tiny_model, tmp_path):
    """A server with lowered limits: a body past --max-body-bytes 413, a branch past --max-branch-tokens and a
    request past --max-request-tokens 422, before any model call, in the seed's shape; past --max-concurrent
    529 with Retry-After; past --timeout 504 (the engine waits --batch-wait-ms, longer than the timeout)."""
    s = Server(tmp_path, "-m", str(tiny_model), "-b", "hf", "--max-body-bytes", "5000", "--max-branch-tokens", "300",
               "--max-request-tokens", "700", "--max-concurrent", "1", "--timeout", "3", "--batch-wait-ms", "6000")  # fmt: skip
    try:
        def refused(body, status: int) -> str:
            r = s.post(body, path="/v1/systemone")
            assert r.status_code == status, r.text[:300]
            return ErrorResponse.model_validate(r.json()).error.message

        assert refused({**PAYLOAD, "state": "x " * 3000}, 413) == "Request body is too large"
        msg = refused({**PAYLOAD, "state": "word " * 400}, 422)
        assert msg.startswith("A question branch exceeds the 300-token context limit"), msg
        many = {f"q{i}": {"type": "noul", "instructions": "Is it urgent?"} for i in range(16)}
        msg = refused({**PAYLOAD, "questions": many}, 422)
        assert msg.startswith("Request exceeds the total input-token budget across branches"), msg
        got = {}
        small = {**PAYLOAD, "questions": {"yes": PAYLOAD["questions"]["yes"]}}
        t = threading.Thread(target=lambda: got.update(r=s.post(small, path="/v1/systemone")))
        t.start()
        time.sleep(1)  # the first request is in flight (it waits past its timeout)
        busy = s.post(small, path="/v1/systemone")
        assert busy.status_code == 529 and busy.headers["retry-after"] == "1", busy.text
        assert ErrorResponse.model_validate(busy.json()).error.message == "Server is at capacity; retry shortly"
        t.join()
        assert got["r"].status_code == 504, got["r"].text
        assert ErrorResponse.model_validate(got["r"].json()).error.message == "Evaluation deadline exceeded"
    finally:
        assert s.stop() == 143, s.log


# the same rows asked through the seed's route and through `run --layout systemone` (issue 46.4): a message list,
# plain text, a JSON object state; JSON and null descriptions; no instructions, JSON instructions
SAME = [
    README_BODY,
    PAYLOAD,
    {"model": "jev-latest", "state": {"ticket": "Charged twice", "plan": "pro", "seats": 3}, "questions": {
        "team": {"type": "choice", "criteria": {"billing": {"handles": ["refunds", "charges"]}, "technical": None,
                                                "sales": "New plans"}},
        "level": {"type": "score", "instructions": {"rate": "urgency"}, "criteria": ["Low", ["Medium"], "High"]},
        "yes": {"type": "noul", "instructions": "Refund?", "criteria": {"true": "Asks for money back"}}}},
]  # fmt: skip


def test_serve_equals_run_in_the_seeds_layout(seed_server, tiny_model, tmp_path):
    """serve's default layout is the seed's: its answers are `run --layout systemone`'s on the same rows, to
    1e-6, with the same choices."""

    rows = [{"id": f"r{i}", "state": b["state"], "questions": {k: {kk: vv for kk, vv in q.items()}
             for k, q in b["questions"].items()}} for i, b in enumerate(SAME)]  # fmt: skip
    want = run_rows(tiny_model, tmp_path, rows, "--layout", "systemone")
    for i, body in enumerate(SAME):
        got = answered(post(seed_server, body), body)
        for qid, a in got.answers.items():
            w = want[(f"r{i}", qid)]
            assert w["error"] is None, w["error"]
            if isinstance(a, NoulAnswer):
                assert a.noul == pytest.approx(w["p_true"], abs=1e-6)
                continue
            assert list(a.probabilities) == w["options"]
            assert list(a.probabilities.values()) == pytest.approx(w["probs"], abs=1e-6)
            assert a.confidence == pytest.approx(w["confidence"], abs=1e-6)
            if isinstance(a, ChoiceAnswer):
                assert a.choice == w["answer"]
            else:
                assert a.score == pytest.approx(w["score"], abs=1e-6)


def test_refusals_name_the_field_not_a_batch_row(seed_server):
    """A request is one row: its refusals name the field a client sent, not the batch job's `row 0:` (the
    new-user trial of issue 46), on the seed's route and on the product's own."""
    r = post(seed_server, {**PAYLOAD, "state": [{"role": "bot", "content": "hi"}]})
    assert r.status_code == 422, r.text
    msg = ErrorResponse.model_validate(r.json()).error.message
    assert msg.startswith("messages[0].role: unknown role 'bot'; expected one of"), msg
    body = {"state": "x", "questions": {"c": {"type": "score", "instructions": "How?", "criteria": ["one"]}}}
    r = seed_server.post(body, headers=AUTH)
    err = r.json()["error"]
    assert r.status_code == 422 and err["field"] == "questions.c.criteria", r.text
    assert err["message"].startswith("questions.c.criteria: "), err


def test_an_empty_state_is_answered_as_the_seed_renders_it(seed_server, qwen3_tok):
    """The seed's schema takes `state: ""` (one empty user message before the evaluation turn); so does
    serve, its prefix the seed's (tests/readouts/label_logprobs/test_request.py: the ids themselves)."""
    marker = "QUESTION_MARKER_7f3a"
    msgs = [{"role": "user", "content": ""}, {"role": "user", "content": f"{PREAMBLE}\n\n{marker}"}]
    text = qwen3_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    prefix = qwen3_tok(text.split(marker)[0], add_special_tokens=False)["input_ids"]
    for state in ("", [{"role": "user", "content": None}]):
        body = {**PAYLOAD, "state": state}
        r = post(seed_server, body)
        answered(r, body)
        assert r.headers["x-openjev-prefix-tokens"] == str(len(prefix)), r.headers


@pytest.mark.parametrize("blank", [" ", "\n\t "])
def test_a_blank_state_is_answered_as_the_seed_renders_it(seed_server, qwen3_tok, blank):
    """Hostile trial: `state: " "` was a 422 (an empty conversation) where `""` was answered; the seed renders
    the blank text as its user message, and so does serve (the prefix holds the blank)."""
    marker = "QUESTION_MARKER_7f3a"
    msgs = [{"role": "user", "content": blank}, {"role": "user", "content": f"{PREAMBLE}\n\n{marker}"}]
    text = qwen3_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    prefix = qwen3_tok(text.split(marker)[0], add_special_tokens=False)["input_ids"]
    for state in (blank, [{"role": "user", "content": blank}]):
        body = {**PAYLOAD, "state": state}
        r = post(seed_server, body)
        answered(r, body)
        assert r.headers["x-openjev-prefix-tokens"] == str(len(prefix)), r.headers


@pytest.mark.parametrize("content", [[], [{"type": "text", "text": ""}]], ids=["no-parts", "an-empty-part"])
def test_empty_content_parts_are_the_empty_state(seed_server, content):
    """Attack trial: `content: []` was refused (an empty conversation) where the seed renders an empty message;
    answered as `state: ""` is, with the same prefix."""
    empty = post(seed_server, {**PAYLOAD, "state": ""})
    body = {**PAYLOAD, "state": [{"role": "user", "content": content}]}
    r = post(seed_server, body)
    assert answered(r, body).answers == answered(empty, PAYLOAD).answers
    assert r.headers["x-openjev-prefix-tokens"] == empty.headers["x-openjev-prefix-tokens"]


def test_two_options_that_read_the_same_are_a_422(seed_server):
    """The layout hides the keys: `A: Payments` / `B: Payments` left the model only the letters' order."""
    body = json.loads(json.dumps(PAYLOAD))
    body["questions"]["team"]["criteria"]["technical"] = "Payments"
    r = post(seed_server, body)
    msg = ErrorResponse.model_validate(r.json()).error.message
    assert r.status_code == 422 and "options 'billing' and 'technical' read the same" in msg, r.text[:300]
    assert "row " not in msg  # the field, not a batch row


def test_one_question_finds_the_prefix_cached_as_on_the_seed(seed_server):
    body = {**PAYLOAD, "questions": {"yes": PAYLOAD["questions"]["yes"]}}
    r = post(seed_server, body)
    answered(r, body)
    prefix = int(r.headers["x-openjev-prefix-tokens"])
    assert prefix > 0 and r.headers["x-openjev-cached-tokens"] == str(prefix)  # was 0: the pass was the branch's


def test_the_openapi_document_describes_what_is_served(seed_server):
    """`GET /openapi.json`, as the seed's FastAPI serves it (the seed's README and tests read it): OpenAPI 3.1,
    every schema valid JSON Schema, `/v1/systemone` taking `SystemOneRequest`; its example, posted as it is,
    answered, and real answers, refusals and GET documents valid against the schemas it names."""
    from jsonschema import Draft202012Validator

    assert httpx.get(seed_server.url + "/openapi.json").status_code == 401  # behind the key, as on the seed
    r = httpx.get(seed_server.url + "/openapi.json", headers=AUTH)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text[:300]
    doc = r.json()
    assert doc["openapi"] == "3.1.0" and doc["info"]["title"] == "OpenJev"
    schemas = doc["components"]["schemas"]
    for schema in schemas.values():
        Draft202012Validator.check_schema(schema)

    def valid(name: str, value) -> bool:
        return Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]}).is_valid(value)

    op = doc["paths"]["/v1/systemone"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SystemOneRequest"}
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/SystemOneResponse"}
    assert set(schemas["SystemOneRequest"]["required"]) == {"state", "model", "questions"}
    assert set(schemas["NoulCriteria"]["properties"]) == {"true", "false"}  # the wire names, not the fields'
    example = schemas["SystemOneRequest"]["example"]
    assert valid("SystemOneRequest", example) and valid("SystemOneRequest", README_BODY)
    assert not valid("SystemOneRequest", {**README_BODY, "id": "T1"}) and not valid("SystemOneRequest", {**README_BODY, "state": None})
    got = post(seed_server, example)
    assert len(answered(got, example).answers) == 3 and valid("SystemOneResponse", got.json())
    assert set(op["responses"]["200"]["headers"]) <= set(got.headers) | {"Server-Timing"}
    refused = post(seed_server, {**PAYLOAD, "state": None})
    assert refused.status_code == 422 and valid("HTTPValidationError", refused.json())
    assert valid("ErrorResponse", post(seed_server, {**PAYLOAD, "model": "other"}).json())
    for path, name in (("/v1/models", "ModelsResponse"), ("/v1/limits", "LimitsResponse"),
                       ("/health", "HealthResponse"), ("/health/live", "LiveResponse")):  # fmt: skip
        assert path in doc["paths"] and valid(name, httpx.get(seed_server.url + path, headers=AUTH).json()), path


def test_the_docs_pages_read_the_schema(seed_server):
    """`/docs` (Swagger UI) and `/` (Scalar's reference), as the seed has them: HTML pages whose script a
    browser loads and which read `/openapi.json` from this server."""
    docs = httpx.get(seed_server.url + "/docs", headers=AUTH)
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle" in docs.text and '"/openapi.json"' in docs.text
    home = httpx.get(seed_server.url + "/", headers=AUTH)
    assert home.status_code == 200 and "Scalar.createApiReference" in home.text and '"/openapi.json"' in home.text
    assert httpx.get(seed_server.url + "/docs").status_code == 401  # the seed's test: behind the key
