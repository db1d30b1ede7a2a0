"""How `serve` reads a request body into the label readout's row, under the rules `run` reads a row by (this
readout's `Request`): `id` and `state` are the row's (a string, a message list, `{"messages": [...]}`, or a JSON
object rendered as text), `messages` is the conversation given directly, and `questions` is a question map (as
a questions file holds) or a list of ids of the server's `-q` questions (absent: all of them). The row is
parsed by the readout's own `parse_row`; a row or question it refuses is a FieldError naming the field. Images
are taken inline only (`data:` URLs): a server reads no path a client names.

The token limits are counted as the seed API counts them (openjev-sglang; README "Limits"): a branch holds
its prefix, its suffix and the one output token; a request holds the prefix once more for the warm-up, then
every branch's whole prompt (cache hits included)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...values import value_problem
from ..base import FieldError, RequestReader
from ..rows_images import PendingImage
from .items import question_id
from .question_schema import MAX_OPTIONS
from .questions import MAX_QUESTIONS, QuestionError, QuestionSpec
from .rows import MAX_BRANCH_TOKENS, MAX_ROW_TOKENS, Row, parse_state

if TYPE_CHECKING:
    from ...config import RunConfig

FIELDS = ("id", "state", "messages", "questions")
_STAND_IN = "\ue000"  # a private-use character: any text that is not blank, never shown to a model


@dataclass(frozen=True)
class LabelRequest(RequestReader):
    """`readout` reads a request's own question map; `shared` holds the server's `-q` questions (None without
    a file), of which a request may ask some by id."""

    readout: Any  # LabelLogprobs (a request's own questions)
    shared: Any = None  # LabelLogprobs with the -q questions, or None

    fields = FIELDS
    caps = {"max_questions": MAX_QUESTIONS, "max_options": MAX_OPTIONS,
            "max_branch_tokens": MAX_BRANCH_TOKENS, "max_request_tokens": MAX_ROW_TOKENS}  # fmt: skip

    @classmethod
    def held(cls, readout: Any, cfg: RunConfig) -> LabelRequest:
        own = replace(readout, questions=None, questions_sha256=None)  # a request's own question map
        return cls(own, readout if readout.questions is not None else None)

    def describe(self) -> dict[str, Any]:
        return (self.shared or self.readout).manifest()

    def questions_by_id(self) -> dict[str, QuestionSpec]:
        return {} if self.shared is None else {q.qid: q for q in self.shared.questions or ()}

    def row(self, body: dict[str, Any], limits: Mapping[str, int]) -> Row:
        """The request's row (pos 0: a missing id is `0`, as the first row of an input file)."""
        if unknown := [k for k in body if k not in FIELDS]:
            # the client's key as JSON escapes it, cut short: a lone surrogate could not be encoded (a 500), a
            # newline split the one line, a 100 KB key came back whole twice (hostile trial)
            key = json.dumps(unknown[0])[1:-1]
            key = key if len(key) <= 80 else key[:80] + "…"
            raise FieldError(f"{key}: unknown field; a request has {', '.join(FIELDS)}", key)
        if "state" in body and "messages" in body:
            raise FieldError("messages: give `state` or `messages`, not both", "messages")
        rec: dict[str, Any] = {k: body[k] for k in ("id", "state") if k in body}
        if "messages" in body:
            if not isinstance(body["messages"], list):
                raise FieldError(f"messages: expected a list of messages, got {type(body['messages']).__name__}",
                                 "messages")  # fmt: skip
            rec["state"] = {"messages": body["messages"]}
        _inline_images_only(rec.get("state"), "messages" if "messages" in body else "state")
        readout = self._questions(body, rec, limits)
        row = readout.parse_row(0, rec)
        if not isinstance(row, Row):  # a RowError
            raise _error(_named(row.error, row.id, "messages" in body), row.id)
        if bad := [q for q in row.questions if isinstance(q, QuestionError)]:
            raise _error(bad[0].error, row.id)
        for q in row.questions:
            assert isinstance(q, QuestionSpec)  # the errors were refused above
            if readout.calibration is not None:  # as the readout would find it after the model call
                try:
                    readout.calibration.entry(q.qid, q.type, q.options)
                except ValueError as e:
                    raise FieldError(f"questions.{q.qid}: {e}", f"questions.{q.qid}") from None
            if len(q.options) > limits["max_options"]:
                raise FieldError(f"questions.{q.qid}.criteria: {len(q.options)} options, this "
                                 f"server takes at most {limits['max_options']}", f"questions.{q.qid}.criteria")  # fmt: skip
        return row

    def seed_row(self, body: dict[str, Any], limits: Mapping[str, int]) -> Row:
        """`row`'s, and a conversation whose every text is empty read as the seed reads it: the seed's `state: ""`
        (or null contents) is one empty user message, answered, where a batch row with no text is an error. The
        row is read with a stand-in text, so every other check still applies, then its texts set back."""
        msgs = body.get("messages")  # blank: "" or only whitespace (" " is text to the seed too: hostile trial)
        if not (isinstance(msgs, list) and msgs and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                        and not m["content"].strip() for m in msgs)):  # fmt: skip
            return self.row(body, limits)
        row = self.row({**body, "messages": [{**m, "content": _STAND_IN} for m in msgs]}, limits)
        blanks = [m["content"] for m in msgs]  # one row message a request message
        return replace(row, messages=tuple(replace(r, content=b) for r, b in zip(row.messages, blanks, strict=True)))

    def _questions(self, body: dict, rec: dict, limits: Mapping[str, int]) -> Any:
        """The readout that parses this request's questions: `readout` with the body's map in `rec`, or
        `shared` narrowed to the ids asked. Raises FieldError."""
        qs, most = body.get("questions"), limits["max_questions"]
        known = self.questions_by_id()
        if isinstance(qs, dict):
            if len(qs) > most:
                raise FieldError(f"questions: {len(qs)} questions; at most {most} a request", "questions")
            rec["questions"] = qs
            return self.readout
        if qs is None:
            if self.shared is None:
                raise FieldError("questions: missing (this server has no -q questions file to default to)",
                                 "questions")  # fmt: skip
            qs = list(known)
        if not isinstance(qs, list):
            raise FieldError("questions: expected a question map (id → question) or a list of question ids of "
                             f"the server's -q file, got {type(qs).__name__}", "questions")  # fmt: skip
        if not qs:
            raise FieldError("questions: no questions", "questions")
        if len(qs) > most:
            raise FieldError(f"questions: {len(qs)} questions; at most {most} a request", "questions")
        for i, q in enumerate(qs):
            if not isinstance(q, str) or q not in known:
                what = "no -q questions file" if self.shared is None else f"its -q file has {', '.join(known)}"
                shown = json.dumps(q)[:80] if value_problem(q) is None else "a value"
                raise FieldError(f"questions[{i}]: {shown} is no question of this server ({what})",
                                 f"questions[{i}]")  # fmt: skip
        if len(set(qs)) != len(qs):
            dup = next(q for q in qs if qs.count(q) > 1)
            raise FieldError(f"questions: {dup!r} asked twice", "questions")
        return replace(self.shared, questions=tuple(known[q] for q in qs))

    def refused(self, row: Row, error: str) -> FieldError:
        return _error(error, row.id)

    def check(self, row: Row, prompt: Any, limits: Mapping[str, int]) -> FieldError | None:
        """The server's token limits, counted as the seed counts them (the module doc)."""
        prefix = len(prompt.prefix)
        for b in prompt.branches:
            if (n := prefix + len(b.suffix) + 1) > limits["max_branch_tokens"]:
                qid = question_id(b.qid)  # a multi or debiased question's branches carry their item
                return FieldError(f"A question branch exceeds the {limits['max_branch_tokens']}-token context "
                                  f"limit (questions.{qid}: {n} tokens with its output token)",
                                  f"questions.{qid}")  # fmt: skip
        total = prefix + sum(prefix + len(b.suffix) for b in prompt.branches)
        if total > limits["max_request_tokens"]:
            return FieldError(f"Request exceeds the total input-token budget across branches ({total} tokens, "
                              f"the warm-up's and every branch's; at most {limits['max_request_tokens']})",
                              "state")  # fmt: skip
        return None


def _error(text: str, row_id: str | None) -> FieldError:
    """A FieldError from a row or question error (`row T7: questions.q1.criteria: why`), worded for an HTTP
    client: without the batch job's row prefix (a request is one row; `row 0:` named nothing a client sent).
    The field is the part after the row id up to its first colon, when it is one of the body's fields."""
    rest = text
    for head in (f"row {row_id}: ", "row at index 0: "):  # an unusable id: the row by its position
        if text.startswith(head):
            rest = text[len(head) :]
            break
    field = rest.split(": ", 1)[0] if ": " in rest else None
    if field is not None and field.split(".")[0].split("[")[0] not in FIELDS:
        field = None  # a cause, not a field path
    return FieldError(rest, field)


def _named(error: str, row_id: str | None, messages: bool) -> str:
    """A row error about `state` named after the field the request used (`messages`)."""
    if not messages or row_id is None:
        return error
    head = f"row {row_id}: state: "
    if error.startswith(head + "messages"):
        return f"row {row_id}: " + error[len(head) :]
    return error.replace(head, f"row {row_id}: messages: ", 1)


def _inline_images_only(state: Any, name: str) -> None:
    """An image a conversation names by path or URL is refused before parse_row reads it: a server reads no
    file a client names. Inline `data:` images pass on to the readout's own checks."""
    if state is None or value_problem(state) is not None:
        return  # parse_row names what is wrong
    try:
        messages, _ = parse_state(state)
    except (ValueError, RecursionError):
        return  # parse_row names what is wrong
    for m in messages:
        for p in m.parts:
            if isinstance(p, PendingImage):
                v = p.value.get("url") if isinstance(p.value, dict) else p.value
                if not (isinstance(v, str) and v.startswith("data:")):
                    field = f"{name}.{p.field}" if name == "state" else p.field
                    raise FieldError(f"{field}: images are taken as data: URLs only (a server reads no "
                                     "path or URL a client names)", field)  # fmt: skip
