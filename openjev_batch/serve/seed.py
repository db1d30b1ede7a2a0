"""The seed's API (openjev-sglang, `POST /v1/systemone`), the one place `serve` speaks it: its request and
response schemas as typed models, a request turned into the row body the readout reads (`row_body`) and the
readout's records turned into the seed's answers (`response`).

What a client can tell is the seed's: the models' names and fields (so a validation error reads as FastAPI
words it over the seed's schema: `{"detail": [{type, loc, msg, input, ...}]}`), `model` required and echoed,
`state` as text, a JSON object or array (compact JSON), a message list or exactly `{"messages": [...]}`,
`instructions` optional (the seed's default when absent or null), criteria descriptions as text or JSON (null:
the option's key stands in), `usage` counted as the seed counts it (`input_tokens`: the warm-up's prompt and
every branch's whole prompt, cache hits included; `output_tokens`: one per question plus the warm-up's).
The prompt itself is the readout's (`--layout systemone`, the seed's layout, is serve's default)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from .request import loads

MAX_QUESTIONS, MAX_ANSWERS = 64, 64  # the seed's schema bounds (a server may lower them: /v1/limits)
ALIAS = "jev-latest"  # the seed's compatibility alias; any `jev-*` name is one too
DEFAULT_INSTRUCTIONS = "Answer using the options below."  # the seed's, for a question without instructions
CATALOGUE_DATE = "2026-09-17"  # the seed catalogue's entry date of its models (ModelEntry.release_date)

Content = str | dict[str, JsonValue] | list[JsonValue]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoulCriteria(Strict):
    yes: Content | None = Field(default="Yes", alias="true")
    no: Content | None = Field(default="No", alias="false")


class NoulQuestion(Strict):
    type: Literal["noul"]
    instructions: Content | None = None
    criteria: NoulCriteria | None = Field(default_factory=NoulCriteria)


class ChoiceQuestion(Strict):
    type: Literal["choice"]
    instructions: Content | None = None
    criteria: dict[str, Content | None] = Field(min_length=2, max_length=MAX_ANSWERS)


class ScoreQuestion(Strict):
    type: Literal["score"]
    instructions: Content | None = None
    criteria: list[Content | None] = Field(min_length=2, max_length=MAX_ANSWERS)


Question = Annotated[NoulQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


# a request a reader of the schema may post as it is (`example` in the OpenAPI document, as the seed's has one)
EXAMPLE: dict[str, Any] = {
    "model": ALIAS,
    "state": "I was charged twice for my subscription this month. Please refund the second charge.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer ask for money back?"},
        "team": {"type": "choice", "instructions": "Which team should take this ticket?",
                 "criteria": {"billing": "Charges, invoices and refunds", "technical": "Bugs and outages"}},
        "urgency": {"type": "score", "instructions": "How urgent is the ticket?",
                    "criteria": ["Can wait", "Today", "Right now"]},
    },
}  # fmt: skip


class SystemOneRequest(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"example": EXAMPLE})

    state: Content
    model: str = Field(min_length=1)
    questions: dict[str, Question] = Field(min_length=1, max_length=MAX_QUESTIONS)


class NoulAnswer(Strict):
    type: Literal["noul"] = "noul"
    noul: float = Field(ge=0, le=1)


class ChoiceAnswer(Strict):
    type: Literal["choice"] = "choice"
    choice: str
    probabilities: dict[str, float]
    confidence: float = Field(ge=0, le=1)


class ScoreAnswer(Strict):
    type: Literal["score"] = "score"
    score: float = Field(ge=0)
    legend: dict[str, Content | None]
    probabilities: dict[str, float]
    confidence: float = Field(ge=0, le=1)


class Usage(Strict):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class SystemOneResponse(Strict):
    model: str
    answers: dict[str, NoulAnswer | ChoiceAnswer | ScoreAnswer]
    usage: Usage


class Invalid(Exception):
    """A body the seed's schema refuses: `status` 422 with FastAPI's `detail` list, or 400 with its text (a
    body that is no text FastAPI's JSON reader takes)."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(str(detail))
        self.status, self.detail = status, detail

    def body(self) -> dict[str, Any]:
        return {"detail": self.detail}


def parse(raw: bytes) -> SystemOneRequest:
    """The request of a body, read and validated as FastAPI reads the seed's (its JSON reader, then the
    schema, each error's `loc` under "body"). Raises Invalid."""
    body: Any = None
    if raw:
        try:  # a key given twice is refused, as in a JSONL line: which `role` would a message have?
            body = loads(raw)
        except json.JSONDecodeError as e:
            raise Invalid(422, [_json_error(e.pos, e.msg)]) from None
        except RecursionError:
            raise Invalid(422, [_json_error(0, "nested too deeply")]) from None
        except ValueError as e:  # a key twice; not UTF-8 (FastAPI: 400); past the 4,300-digit parse limit
            if isinstance(e, UnicodeDecodeError) or "digits" in str(e):
                raise Invalid(400, "There was an error parsing the body") from None
            raise Invalid(422, [_json_error(0, str(e))]) from None
    try:
        return SystemOneRequest.model_validate(body)
    except ValidationError as e:
        errors = [{**err, "loc": ["body", *err["loc"]]} for err in e.errors(include_url=False)]
        raise Invalid(422, json.loads(json.dumps(errors, default=str))) from None


def _json_error(pos: int, why: str) -> dict[str, Any]:
    return {"type": "json_invalid", "loc": ["body", pos], "msg": "JSON decode error", "input": {},
            "ctx": {"error": why}}  # fmt: skip


# a `jev-*` alias: a name after `jev-` (a version, `latest`), no space, no control character, at most 100 long
# (the seed takes any name starting `jev-`; the attack trial sent `jev-`, `jev-latest ` and a 10 KB `jev-…`, each
# accepted and echoed back whole. A seed peer's client checks a response's model the same way: `jev-`, letters,
# digits, `-._`, ≤ 100)
JEV_ALIAS = re.compile(r"jev-[A-Za-z0-9][A-Za-z0-9._+-]{0,95}")


def known_model(name: str, names: tuple[str, ...]) -> bool:
    """Whether a request's `model` names this server: `jev-latest`, any `jev-*` alias (a pinned version is a
    drop-in swap), or one of `names` (the served id, the `-m` name)."""
    return name in names or JEV_ALIAS.fullmatch(name) is not None


def unknown_model(name: str) -> str:
    """The seed's 422 message, the name JSON-escaped and cut at 100 characters (it is echoed)."""
    shown = json.dumps(name, ensure_ascii=False)[1:-1]
    return f"Unknown model: {shown if len(shown) <= 100 else shown[:100] + '…'}"


def text(value: Content) -> str:
    """A text or JSON value as the model reads it: a string as it is, JSON compact (the seed's serializer:
    no spaces, non-ASCII kept)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def state_body(state: Content) -> dict[str, Any]:
    """The row fields of a seed `state`: a message list, or exactly `{"messages": [...]}`, as the conversation
    (message objects as given; a null or missing content is empty text); anything else as the text of one
    user turn (JSON compact, kept whole: an object with `messages` and other keys is data, not a chat)."""
    chat: Any = state["messages"] if isinstance(state, dict) and set(state) == {"messages"} else state
    if isinstance(chat, list) and chat and all(isinstance(m, dict) and "role" in m for m in chat):
        return {"messages": [{**m, "content": _content(m.get("content"))} for m in chat]}
    return {"messages": [{"role": "user", "content": text(state)}]}


def _content(c: Any) -> Any:
    """A message's content as the seed reads it: null, `[]` and text parts that are all empty are empty text
    (the seed renders them so; the readout's row would refuse an empty conversation)."""
    if c is None or (isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                                  and p.get("text") == "" for p in c)):  # fmt: skip
        return ""
    return c


def question_body(q: NoulQuestion | ChoiceQuestion | ScoreQuestion) -> dict[str, Any]:
    """The readout's question of a seed question: the seed's default instructions when none are given, JSON
    made compact text, a null description the option's key (noul: `true` / `false`)."""
    out: dict[str, Any] = {"type": q.type, "instructions": DEFAULT_INSTRUCTIONS if q.instructions is None
                           else text(q.instructions)}  # fmt: skip
    if isinstance(q, NoulQuestion):
        c = q.criteria
        out["criteria"] = {"true": "true" if c is None or c.yes is None else text(c.yes),
                           "false": "false" if c is None or c.no is None else text(c.no)}  # fmt: skip
    elif isinstance(q, ChoiceQuestion):
        out["criteria"] = {k: None if v is None else text(v) for k, v in q.criteria.items()}
    else:
        out["criteria"] = [str(i) if v is None else text(v) for i, v in enumerate(q.criteria)]
    return out


def row_body(req: SystemOneRequest) -> dict[str, Any]:
    """The body the readout reads into a row (its `Request` reader): the state and every question."""
    return {**state_body(req.state), "questions": {k: question_body(q) for k, q in req.questions.items()}}


def usage(records: list[dict[str, Any]], prefix_tokens: int) -> Usage:
    """`usage` as the seed counts it: the warm-up's prompt (the prefix) and each branch's whole prompt; one
    output token for the warm-up and one per question."""
    branches = sum(r.get("branch_tokens") or 0 for r in records)
    return Usage(input_tokens=prefix_tokens + branches, output_tokens=len(records) + 1)


def answer(q: NoulQuestion | ChoiceQuestion | ScoreQuestion, rec: dict[str, Any]) -> Any:
    """A question's answer from the readout's record of it (`type`, `options`, `probs`, `answer`, `p_true`,
    `score`, `confidence`)."""
    probs = dict(zip(rec["options"], (float(p) for p in rec["probs"]), strict=True))
    conf = min(max(float(rec["confidence"]), 0.0), 1.0)
    if isinstance(q, NoulQuestion):
        return NoulAnswer(noul=min(max(float(rec["p_true"]), 0.0), 1.0))
    if isinstance(q, ChoiceQuestion):
        return ChoiceAnswer(choice=rec["answer"], probabilities=probs, confidence=conf)
    legend = {str(i): v for i, v in enumerate(q.criteria)}
    return ScoreAnswer(score=max(float(rec["score"]), 0.0), legend=legend, probabilities=probs, confidence=conf)


def response(req: SystemOneRequest, records: list[dict[str, Any]], prefix_tokens: int) -> SystemOneResponse:
    """The seed's response: `model` as the request named it, one answer per question in the request's order."""
    by_id = {r["question_id"]: r for r in records}
    answers = {k: answer(q, by_id[k]) for k, q in req.questions.items()}
    return SystemOneResponse(model=req.model, answers=answers, usage=usage(records, prefix_tokens))


def error_body(message: str) -> dict[str, Any]:
    """The seed's body of every refusal but a schema's: `{"error": {"message": …}}`."""
    return {"error": {"message": message}}


def models(names: tuple[str, ...], served: str) -> dict[str, Any]:
    """GET /v1/models: the names a request may give, in the seed's catalogue and OpenAI's list shapes."""
    return {
        "object": "list",
        "data": [{"id": n, "object": "model", "owned_by": "openjev"} for n in names],
        "models": [{"name": n, "description": f"OpenJev classification using {served}",
                    "release_date": CATALOGUE_DATE} for n in names],  # fmt: skip
    }
