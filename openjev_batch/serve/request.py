"""A request body → the readout's row, under the rules `run` reads a row by: the body is parsed as a JSONL line
is (UTF-8, a JSON object, no key given twice), `id` and `state` are the row's (a string, a message list,
`{"messages": [...]}`, or a JSON object rendered as text), `messages` is the conversation given directly, and
`questions` is a question map (as a questions file holds) or a list of ids of the server's `-q` questions
(absent: all of them). The row is parsed by the readout's own `parse_row`; a row or question it refuses is a
422 naming the field (limits.row_error). Images are taken inline only (`data:` URLs): a server reads no path
a client names. The body itself is read within `--max-body-bytes` (`read_body`, 413)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..config import build_config
from ..readouts import build
from ..readouts.label_logprobs import LabelLogprobs
from ..readouts.label_logprobs.questions import QuestionError, QuestionSpec
from ..readouts.label_logprobs.rows import Row, parse_state
from ..readouts.rows_images import PendingImage
from ..values import no_duplicate_keys, value_problem
from .limits import FIELDS, HTTPError, Limits, row_error

if TYPE_CHECKING:
    from starlette.requests import Request


@dataclass(frozen=True)
class Readouts:
    """The readout held open, twice: `own` reads a request's own question map; `shared` holds the server's
    `-q` questions (None without one), of which a request may ask some by id."""

    own: LabelLogprobs
    shared: LabelLogprobs | None

    def questions_by_id(self) -> dict[str, QuestionSpec]:
        return {} if self.shared is None else {q.qid: q for q in self.shared.questions or ()}


def held_readouts(clf: Any, questions: Path | None) -> tuple[Any, Readouts]:
    """The job config and the readouts of a server on the Classifier `clf` held open: its options (the CLI's
    door, `build_config`) with the `-q` file's questions, checked as `run` checks them (ConfigError), built by
    the readout registry with the started backend's labels."""
    cfg = build_config(**{**clf._options, "questions": questions})
    shared = cast(LabelLogprobs, build(cfg.readout, cfg, clf.backend.labels))  # a server's readout (label-logprobs)
    own = replace(shared, questions=None, questions_sha256=None)  # a request's own question map
    return cfg, Readouts(own, shared if questions is not None else None)


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


def read_row(raw: bytes, readouts: Readouts, limits: Limits) -> Row:
    """The row of a body (`parse_body`, `parse_request`). Raises HTTPError 422, also for a body the readers
    did not foresee (its one line, not a traceback)."""
    try:
        return parse_request(parse_body(raw), readouts, limits)
    except HTTPError:
        raise
    except RecursionError:
        raise HTTPError(422, "body: nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - a body the readers did not foresee: its one line, not a traceback
        raise HTTPError(
            422, f"body: cannot be read as a row: {type(e).__name__}: {str(e)[:300]}"
        ) from None


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, read as a JSONL line is. Raises HTTPError 422."""
    try:
        body = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicate_keys)
    except UnicodeDecodeError as e:
        raise HTTPError(422, f"body: not valid UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise HTTPError(422, f"body: malformed JSON ({e.msg} at char {e.pos})") from None
    except RecursionError:  # json's C decoder recurses once per level
        raise HTTPError(422, "body: JSON nested too deeply") from None
    except ValueError as e:  # a key twice; an integer past Python's 4,300-digit parse limit
        if "int_max_str_digits" in str(e) or "digits" in str(e):  # not Python's advice to the server's operator
            raise HTTPError(422, "body: a number over 4,300 digits") from None
        raise HTTPError(422, f"body: {e}") from None
    if not isinstance(body, dict):
        raise HTTPError(422, f"body: expected a JSON object, got {type(body).__name__}")
    return body


def parse_request(body: dict[str, Any], readouts: Readouts, limits: Limits) -> Row:
    """The request's row (pos 0: a missing id is `0`, as the first row of an input file). Raises HTTPError 422
    for a body `run` would make a row error of, or one over a count limit."""
    if unknown := [k for k in body if k not in FIELDS]:
        # the client's key as JSON escapes it, cut short: a lone surrogate could not be encoded (a 500), a
        # newline split the one line, a 100 KB key came back whole twice (hostile trial)
        key = json.dumps(unknown[0])[1:-1]
        key = key if len(key) <= 80 else key[:80] + "…"
        raise HTTPError(422, f"{key}: unknown field; a request has {', '.join(FIELDS)}", key)
    if "state" in body and "messages" in body:
        raise HTTPError(422, "messages: give `state` or `messages`, not both", "messages")
    rec: dict[str, Any] = {k: body[k] for k in ("id", "state") if k in body}
    if "messages" in body:
        if not isinstance(body["messages"], list):
            raise HTTPError(422, f"messages: expected a list of messages, got {type(body['messages']).__name__}",
                            "messages")  # fmt: skip
        rec["state"] = {"messages": body["messages"]}
    _inline_images_only(rec.get("state"), "messages" if "messages" in body else "state")
    readout = _questions(body, rec, readouts, limits)
    row = readout.parse_row(0, rec)
    if not isinstance(row, Row):  # a RowError
        raise row_error(_named(row.error, row.id, "messages" in body), row.id)
    if bad := [q for q in row.questions if isinstance(q, QuestionError)]:
        raise row_error(bad[0].error, row.id)
    for q in (q for q in row.questions if isinstance(q, QuestionSpec)):  # every one (no QuestionError: above)
        if readout.calibration is not None:  # as the readout would find it after the model call
            try:
                readout.calibration.entry(q.qid, q.type, q.options)
            except ValueError as e:
                raise HTTPError(422, f"row {row.id}: questions.{q.qid}: {e}", f"questions.{q.qid}") from None
        if len(q.options) > limits.max_options:
            raise HTTPError(422, f"row {row.id}: questions.{q.qid}.criteria: {len(q.options)} options, this "
                            f"server takes at most {limits.max_options}", f"questions.{q.qid}.criteria")  # fmt: skip
    return row


def _questions(body: dict, rec: dict, readouts: Readouts, limits: Limits) -> LabelLogprobs:
    """The readout that parses this request's questions: `own` with the body's map in `rec`, or `shared`
    narrowed to the ids asked. Raises HTTPError 422."""
    qs = body.get("questions")
    known = readouts.questions_by_id()
    if isinstance(qs, dict):
        if len(qs) > limits.max_questions:
            raise HTTPError(422, f"questions: {len(qs)} questions; at most {limits.max_questions} a request",
                            "questions")  # fmt: skip
        rec["questions"] = qs
        return readouts.own
    if qs is None:
        if readouts.shared is None:
            raise HTTPError(422, "questions: missing (this server has no -q questions file to default to)",
                            "questions")  # fmt: skip
        qs = list(known)
    if not isinstance(qs, list):
        raise HTTPError(422, "questions: expected a question map (id → question) or a list of question ids of "
                        f"the server's -q file, got {type(qs).__name__}", "questions")  # fmt: skip
    if not qs:
        raise HTTPError(422, "questions: no questions", "questions")
    if len(qs) > limits.max_questions:
        raise HTTPError(422, f"questions: {len(qs)} questions; at most {limits.max_questions} a request",
                        "questions")  # fmt: skip
    for i, q in enumerate(qs):
        if not isinstance(q, str) or q not in known:
            what = (
                "no -q questions file" if readouts.shared is None else f"its -q file has {', '.join(known)}"
            )
            shown = json.dumps(q)[:80] if value_problem(q) is None else "a value"
            raise HTTPError(422, f"questions[{i}]: {shown} is no question of this server ({what})",
                            f"questions[{i}]")  # fmt: skip
    if len(set(qs)) != len(qs):
        dup = next(q for q in qs if qs.count(q) > 1)
        raise HTTPError(422, f"questions: {dup!r} asked twice", "questions")
    shared = cast(LabelLogprobs, readouts.shared)  # each id asked is known: there is a -q file
    return replace(shared, questions=tuple(known[q] for q in qs))


def _named(error: str, row_id: str | None, messages: bool) -> str:
    """A row error about `state` named after the field the request used (`messages`)."""
    if not messages or row_id is None:
        return error
    head = f"row {row_id}: state: "
    if error.startswith(head + "messages"):
        return f"row {row_id}: " + error[len(head) :]
    return error.replace(head, f"row {row_id}: messages: ", 1)


def _inline_images_only(state: Any, name: str) -> None:
    """An image a conversation names by path or URL is refused (422) before parse_row reads it: a server reads
    no file a client names. Inline `data:` images pass on to the readout's own checks."""
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
                    raise HTTPError(422, f"{field}: images are taken as data: URLs only (a server reads no "
                                    "path or URL a client names)", field)  # fmt: skip
