"""The label readout's input rows: `parse_row` never raises for bad data: it returns a `Row` whose bad
questions are `QuestionError`s, or a `RowError` when the row as a whole is unusable (no conversation,
malformed JSON, ...). Every message names the row id and the field, e.g.
``row T7: questions.urgency.criteria: score needs 2–64 levels, got 1``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ...core import RowError, checked_row_id, unidentified_row_error
from ...values import (
    MAX_STATE_BYTES,
    given_fields,
    kept_values,
    kind_of,
    no_duplicate_keys,
    text_bytes,
    value_problem,
)
from ..rows_images import content_parts, resolve_images
from .questions import QuestionError, QuestionSpec, parse_questions

MAX_BRANCH_TOKENS = 32_768
MAX_ROW_TOKENS = 262_144
ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class Message:
    """`content`: the message's text (its text parts joined); `parts`: for content given as parts with images,
    the text pieces and images in order (str | ImageRef; readouts/rows_images.py), else empty."""

    role: str
    content: str
    parts: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Row:
    """A readable row. `pos` is the 0-based input position (output order); `plain` marks a string state (or a
    JSON record rendered as one)."""

    pos: int
    id: str
    messages: tuple[Message, ...]
    plain: bool
    questions: tuple[QuestionSpec | QuestionError, ...]
    kept: dict[str, Any] = field(default_factory=dict)
    images: tuple[Any, ...] = ()  # the `image` / `images` column's ImageRefs: first in the user turn
    # a JSON object or list state as compact JSON (the systemone layout's user message; the transcript layout
    # reads `messages`, its `key: value` lines); None for a string or conversation state
    record: str | None = None


_JSON_CONVERSATION = re.compile(r'^(\{\s*"messages"|\[\s*\{\s*")')


def parse_state(raw: Any) -> tuple[tuple[Message, ...], bool]:
    """`state` → (messages, plain). Accepts a string, a JSON string of a message list or of
    ``{"messages": [...]}``, or those structures; any other JSON object or list (not a string holding one)
    is a data record rendered as text by `record_text`. A message list is a non-empty list whose every item
    is an object with a `role` (`_is_message_list`). Raises ValueError naming the sub-field.

    A string that starts with `{` or `[` is read as JSON when it parses to a conversation (a message list, or
    an object whose `messages` is one); malformed JSON is an error only when the string starts like one
    (`{"messages"` or `[{"`). Any other string is the text of one user message, also one that begins with
    `{` or `[` ("{name} wrote: …", "[URGENT] …", "[1, 2] are my orders")."""
    if isinstance(raw, str):
        raw = _conversation_in_text(raw)
        if isinstance(raw, str):
            return (Message("user", raw),), True
    raw = given_fields(raw)  # a Parquet struct's fields this row does not have are not `key: null` lines
    if isinstance(raw, dict) and _is_conversation_object(raw):
        if set(raw) != {"messages"}:
            raise ValueError(
                f"an object with 'messages' is a conversation and has only that key, got keys {sorted(raw)}"
            )
        raw = raw["messages"]
    elif isinstance(raw, dict) or (isinstance(raw, list) and raw and not _is_message_list(raw)):
        text = record_text(raw)  # a data record (a ticket's fields, a list of items): text for one user turn
        if not text.strip():
            raise ValueError("empty state object")
        if (n := text_bytes(text)) > MAX_STATE_BYTES:
            raise ValueError(f"{n:,} bytes of rendered text, limit {MAX_STATE_BYTES:,}")
        return (Message("user", text),), True
    if not isinstance(raw, list):
        raise ValueError(
            "expected a string, a list of messages, {'messages': [...]}, or a JSON object or list "
            f"(rendered as text), got {kind_of(raw)}"
        )
    return _messages(raw), False


def _conversation_in_text(raw: str) -> Any:
    """The conversation a JSON string holds (parsed: a list of objects, or an object with `messages`), else
    the string itself. Raises ValueError (too long, empty, malformed JSON that starts like a conversation)."""
    if (n := text_bytes(raw)) > MAX_STATE_BYTES:
        raise ValueError(f"{n:,} bytes of text, limit {MAX_STATE_BYTES:,}")
    s = raw.strip()
    if not s:
        raise ValueError("empty conversation")
    if s[:1] not in "[{":
        return raw
    try:
        parsed = json.loads(s, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as e:
        if _JSON_CONVERSATION.match(s):
            raise ValueError(f"malformed JSON ({e.msg} at char {e.pos})") from None
        return raw
    except ValueError:  # a key twice: a conversation's message would keep its last role/content
        if _JSON_CONVERSATION.match(s):
            raise
        return raw
    is_conversation = _is_conversation_object(parsed) if isinstance(parsed, dict) else _is_message_list(parsed)
    if not is_conversation:
        return raw
    if (problem := value_problem(parsed)) is not None:
        raise ValueError(problem)
    return parsed


def _messages(raw: list) -> tuple[Message, ...]:
    """A list of `{role, content}` messages (content a string or OpenAI-style parts). Raises ValueError."""
    if not raw:
        raise ValueError("empty conversation")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not {"role", "content"} <= set(m):
            raise ValueError(f"messages[{i}]: needs 'role' and 'content'")
        if m["role"] not in ROLES:
            raise ValueError(
                f"messages[{i}].role: unknown role {m['role']!r}; expected one of {sorted(ROLES)}"
            )
        if isinstance(m["content"], list):  # OpenAI-style content parts, images among them
            out.append(Message(m["role"], *content_parts(m["content"], f"messages[{i}].content")))
            continue
        if not isinstance(m["content"], str):
            raise ValueError(f"messages[{i}].content: expected a string or a list of content parts")
        out.append(Message(m["role"], m["content"]))
    if not any(m.content.strip() or m.parts for m in out):
        raise ValueError("empty conversation")
    if (n := sum(text_bytes(m.content) for m in out)) > MAX_STATE_BYTES:
        raise ValueError(f"{n:,} bytes of message text, limit {MAX_STATE_BYTES:,}")
    return tuple(out)


def _is_conversation_object(raw: dict) -> bool:
    """An object is a conversation when its `messages` is a message list (`_is_message_list`), or it is
    `{"messages": []}` alone (an empty conversation, refused as one)."""
    msgs = raw.get("messages")
    return _is_message_list(msgs) or (msgs == [] and set(raw) == {"messages"})


def _is_message_list(items: Any) -> bool:
    """A list is a conversation when it is shaped like one: not empty, and every item an object with a `role`
    (a malformed message, `{"role": "user"}`, is then named as one). Any other list is data: a list of records
    with a `content` field (`[{"content": "item one", "rating": 5}]`) was read as a broken conversation, and
    an object whose `messages` holds plain strings was refused (issue 42)."""
    return isinstance(items, list) and bool(items) and all(isinstance(m, dict) and "role" in m for m in items)


def _field_text(v: Any) -> str:
    # strings as they are; everything else as compact JSON, so `true`, `null`, `3` and nested values read
    # the same in every row and on every platform (default=str: a Parquet date or decimal, deterministically)
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=_plain)
    except TypeError as e:  # a key json cannot write (a tuple)
        raise ValueError(str(e)) from None


def _plain(v: Any) -> str:
    """The text of a non-JSON value Parquet or pandas hands over (a date, a decimal, a UUID): its str, the same
    on every run. Anything else (an API object, bytes) would be its repr, which changes from run to run (a
    memory address) or is no text at all: refused (a hostile trial found `<object object at 0x…>` prompts)."""
    import datetime
    import decimal
    import uuid

    if isinstance(v, datetime.date | datetime.time | datetime.timedelta | decimal.Decimal | uuid.UUID):
        return str(v)
    raise ValueError(f"a {type(v).__name__} value is not JSON text")


def record_text(raw: dict | list) -> str:
    """A JSON object or list state as the text of one user message (README: "JSON object and list states"):
    an object gives one `key: value` line per key, in the order given; a list one `- value` line per item;
    a string value is written as it is, any other value (number, boolean, null, nested object or list) as
    compact JSON. Plain text, never markup: the prompter tokenizes it as any other content."""
    if isinstance(raw, dict):
        if bad := [k for k in raw if not isinstance(k, str)]:
            raise ValueError(f"a key that is not text: {bad[0]!r:.40}")
        return "\n".join(f"{k}: {_field_text(v)}" for k, v in raw.items())
    return "\n".join(f"- {_field_text(v)}" for v in raw)


def ids_and_types(questions: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """(question ids, question types) of parsed questions (specs or errors), aligned; () for None."""
    qs = tuple(questions or ())
    return tuple(q.qid for q in qs), tuple(q.type for q in qs)


def _state_hint(rec: dict[str, Any]) -> str:
    """A hint for a row that carries its conversation under another common name (`text`, `messages`, …)."""
    if "state" in rec:
        return ""
    for name in ("text", "messages", "conversation", "prompt", "content", "input"):
        if rec.get(name) is not None:
            return (
                f" (the row has a {name!r} column: rename it to 'state'; `classify` reads 'text')"
                if name == "text"
                else f" (the row has a {name!r} column: rename it to 'state')"
            )
    return ""


def _own_questions(rec: dict[str, Any]) -> tuple[Any, str | None]:
    """A row's own `questions` field parsed, or (None, what is wrong with it)."""
    if "questions" not in rec or rec["questions"] is None:
        return None, "missing (give a questions column or --questions FILE)"
    try:
        return parse_questions(rec["questions"]), None
    except RecursionError:
        return None, "JSON nested too deeply"
    except json.JSONDecodeError as e:
        return None, f"malformed JSON ({e.msg} at char {e.pos})"
    except ValueError as e:
        return None, str(e)


def parse_row(
    pos: int,
    rec: dict[str, Any],
    shared_questions: Any = None,
    keep: tuple[str, ...] = (),
    image_root: str | None = None,
) -> Row | RowError:
    """One input record → Row or RowError (never raises). `shared_questions` is the parsed
    ``--questions`` file, used when given; otherwise the row's own `questions` field. `image_root`: the
    input file's folder, against which relative image paths resolve (None: only absolute ones).
    """
    kept, kept_problem = kept_values(rec, keep)
    rid, id_problem = checked_row_id(rec.get("id"), pos)
    if id_problem:
        return unidentified_row_error(pos, f"id: {id_problem}", kept, *ids_and_types(shared_questions))
    qids: tuple[str, ...] = ()
    try:
        if shared_questions is not None:
            questions, problem = shared_questions, None
        else:
            questions, problem = _own_questions(rec)
        if problem:
            return RowError(pos, rid, f"row {rid}: questions: {problem}", kept=kept)
        qids, qtypes = ids_and_types(questions)
        if "state" not in rec or rec["state"] is None:
            return RowError(pos, rid, f"row {rid}: state: missing{_state_hint(rec)}", qids, kept, qtypes)
        if (problem := value_problem(rec["state"])) is not None:
            return RowError(pos, rid, f"row {rid}: state: {problem}", qids, kept, qtypes)
        try:
            messages, plain = parse_state(rec["state"])
        except RecursionError:
            return RowError(pos, rid, f"row {rid}: state: JSON nested too deeply", qids, kept, qtypes)
        except ValueError as e:
            return RowError(pos, rid, f"row {rid}: state: {e}", qids, kept, qtypes)
        if kept_problem:
            return RowError(pos, rid, f"row {rid}: {kept_problem}", qids, kept, qtypes)
        images, messages, image_problem = resolve_images(rec, messages, image_root)
        if image_problem:
            return RowError(pos, rid, f"row {rid}: {image_problem}", qids, kept, qtypes)
    except Exception as e:  # a bad row never sinks the job
        return RowError(pos, rid, f"row {rid}: {type(e).__name__}: {e}", qids, kept)
    qs = tuple(
        q if isinstance(q, QuestionSpec) else QuestionError(q.qid, q.type, f"row {rid}: {q.error}")
        for q in questions
    )
    return Row(pos, rid, messages, plain, qs, kept, images, _record(rec["state"]) if plain else None)


def _record(state: Any) -> str | None:
    """A JSON object or list state (not a conversation: the row is plain) as compact JSON, else None."""
    state = given_fields(state)
    return _field_text(state) if isinstance(state, dict | list) else None
