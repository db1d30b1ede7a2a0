"""Rows and questions: the validated input model, and row-level errors.

`parse_row` never raises for bad data: it returns a `Row` whose bad questions are `QuestionError`s,
or a `RowError` when the row as a whole is unusable (no conversation, malformed JSON, ...).
Every message names the row id and the field, e.g.
``row T7: questions.urgency.criteria: score needs 2–64 levels, got 1``.

Size (over the house's ~300 lines): rows and questions are validated together (a row error names its
question fields) and the hostile-value checks apply to both; every message format lives here so they stay
alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

MAX_QUESTIONS = 64
MIN_OPTIONS, MAX_OPTIONS = 2, 64
MAX_BRANCH_TOKENS = 32_768
MAX_ROW_TOKENS = 262_144
# Hostile sizes are refused before any tokenization, so one row's memory stays bounded (a 50 MB state
# string peaked at 6.3 GB RSS in the tokenizer). 2 MiB of conversation is ~2× what the 262,144-token row
# limit admits of English text; 256 KiB of question text ~2× a 32,768-token branch.
MAX_STATE_BYTES = 2 * 2**20
MAX_QUESTION_BYTES = 256 * 2**10
# One input line (JSONL) or record (CSV) is refused unread past this (a 300 MB line peaked at 2.1 GB RSS
# read and decoded whole): 8× the state limit leaves room for JSON's escapes (\uXXXX: up to 6 bytes a
# character) and a row's questions and kept columns.
MAX_LINE_BYTES = 8 * MAX_STATE_BYTES
# A --questions file: all MAX_QUESTIONS questions at their text limit, twice over for markup and escapes.
MAX_QUESTIONS_FILE_BYTES = 2 * MAX_QUESTIONS * MAX_QUESTION_BYTES
MAX_ID_CHARS = 4096  # row and question ids (they are repeated in every output row and error)
MAX_DEPTH = 64  # nesting of any input value (JSON objects/lists); deeper is a row error, not a RecursionError
INT64 = (-(2**63), 2**63 - 1)
ROLES = frozenset({"system", "user", "assistant", "tool"})
QUESTION_TYPES = ("noul", "choice", "score")


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class InvalidText:
    """Stands in for an input cell that could not be decoded (invalid UTF-8 in a Parquet string column);
    `parse_row` turns it into a row error naming the field."""

    why: str


def value_problem(value: Any, ints: bool = False) -> str | None:
    """Why `value` cannot be carried as text/Arrow data, or None: a lone surrogate in a string (JSON `\\ud800`
    escapes; not encodable as UTF-8), an undecodable cell, nesting deeper than MAX_DEPTH, and with `ints` an
    integer outside int64 (Arrow's integer type). Iterative: a 100,000-deep value costs no recursion."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    return f"not valid Unicode text (lone surrogate {v[e.start]!r} at character {e.start})"
        elif isinstance(v, dict | list | tuple):
            if depth >= MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            items = v.items() if isinstance(v, dict) else v
            for x in items:
                stack.extend(
                    ((x[0], depth + 1), (x[1], depth + 1)) if isinstance(v, dict) else ((x, depth + 1),)
                )
        elif isinstance(v, InvalidText):
            return v.why
        elif ints and isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
            return f"integer {str(v)[:30]}{'…' if len(str(v)) > 30 else ''} is outside int64"
    return None


def option_text_problem(v: str) -> str | None:
    """`value_problem` of an option's text (a path, --system-prompt, --template): on the command line a byte
    that is not UTF-8 arrives as a surrogate escape (U+DC80–U+DCFF: Python decodes argv with
    surrogateescape), so it is named as the byte the user typed (a Latin-1 `Café`), not as a surrogate."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        c = ord(v[e.start])
        if 0xDC80 <= c <= 0xDCFF:
            return f"not valid UTF-8 (byte {c - 0xDC00:#04x} at character {e.start})"
        return value_problem(v)
    return None


def text_bytes(s: str) -> int:
    """UTF-8 size of `s` (4 × its length bounds it, so only strings near a limit are encoded)."""
    return len(s.encode("utf-8", "surrogatepass")) if not s.isascii() else len(s)


@dataclass(frozen=True)
class QuestionSpec:
    """One validated question. `options` are the names reported in the output (noul: true/false;
    score: "0".."K-1"); `descriptions[i]` is what the model reads for option i (None: name only)."""

    qid: str
    type: Literal["noul", "choice", "score"]
    instructions: str
    options: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    # what the assistant turn starts with before the label ("Answer:" when None)
    answer_lead: str | None = None
    # worked examples shown before the row's text: (example text, index of its option)
    examples: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class QuestionError:
    qid: str
    type: str | None
    error: str


@dataclass(frozen=True)
class Row:
    """A readable row. `pos` is the 0-based input position (output order); `plain` marks a string state."""

    pos: int
    id: str
    messages: tuple[Message, ...]
    plain: bool
    questions: tuple[QuestionSpec | QuestionError, ...]
    kept: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RowError:
    """A row that cannot be answered at all; it still appears in the output with this error."""

    pos: int
    id: str | None  # None only for a line that could not be parsed at all (its id is unknown)
    error: str
    qids: tuple[str, ...] = ()
    kept: dict[str, Any] = field(default_factory=dict)
    qtypes: tuple[str | None, ...] = ()  # aligned with qids where the questions were readable

    def type_of(self, i: int) -> str | None:
        return self.qtypes[i] if i < len(self.qtypes) else None


class _Question(BaseModel):
    """The systemone question schema (`type`, `instructions`, `criteria`); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    instructions: str
    criteria: Any = None
    answer_lead: str | None = None
    examples: list[Any] | None = None

    @field_validator("answer_lead")
    @classmethod
    def _lead(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or len(v) > 200):
            raise ValueError("must be 1–200 characters, not only whitespace")
        return v

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in QUESTION_TYPES:
            raise ValueError(f"unknown question type {v!r}; expected one of {', '.join(QUESTION_TYPES)}")
        return v

    @field_validator("instructions")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @model_validator(mode="after")
    def _criteria(self) -> _Question:
        c, t = self.criteria, self.type
        if t == "noul":
            if c is not None and (not isinstance(c, dict) or set(c) - {"true", "false"}):
                got = f" (got keys {', '.join(map(repr, c))})" if isinstance(c, dict) else ""
                raise ValueError(
                    f"criteria: noul criteria must be an object with keys 'true' and/or 'false'{got}"
                )
        elif t == "choice":
            if not isinstance(c, dict):
                raise ValueError("criteria: choice needs an object mapping option name → description")
            if not MIN_OPTIONS <= len(c) <= MAX_OPTIONS:
                raise ValueError(f"criteria: choice needs 2–64 options, got {len(c)}")
            for k, v in c.items():
                if not str(k).strip():
                    raise ValueError("criteria: option names must not be empty")
                if v is not None and not isinstance(v, str):
                    raise ValueError(f"criteria.{k}: description must be a string or null")
        else:
            if not isinstance(c, list):
                raise ValueError("criteria: score needs a list of level descriptions, lowest first")
            if not MIN_OPTIONS <= len(c) <= MAX_OPTIONS:
                raise ValueError(f"criteria: score needs 2–64 levels, got {len(c)}")
            if not all(isinstance(x, str) for x in c):
                raise ValueError("criteria: score levels must be strings")
        return self


def _pairs_to_dict(v: Any, what: str) -> dict:
    """Accept a dict, a JSON string of one, or an Arrow map (list of (key, value) pairs). A key given twice
    is a ValueError: plain json.loads kept the last question of one id silently (CSV / Parquet cells),
    where a JSONL line with it is refused."""
    if isinstance(v, str):
        v = json.loads(v, object_pairs_hook=no_duplicate_keys)
    if isinstance(v, list) and all(isinstance(p, tuple | list) and len(p) == 2 for p in v):
        keys = [p[0] for p in v]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate keys in {what}")
        v = dict(v)
    if not isinstance(v, dict):
        raise ValueError(f"expected an object mapping question_id → question, got {type(v).__name__}")
    return v


def _error_text(where: str, e: ValidationError) -> str:
    """Each pydantic error as `<where>.<field>: why`; a model-level message already names its field
    (`criteria: …`); a whole-object error (no field: a number instead of a question) reads `<where>: why`."""
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        msg = msg.replace(
            "a valid dictionary or instance of _Question", "a question object (type, instructions, criteria)"
        )
        if loc and not msg.startswith("criteria"):
            parts.append(f"{where}.{loc}: {msg}")
        else:
            parts.append(f"{where}.{msg}" if msg.startswith("criteria") else f"{where}: {msg}")
    return "; ".join(parts)


def _noul_keys(c: dict) -> dict:
    """noul criteria keys as `true`/`false`: a Python bool key (a dict built in code, or YAML's unquoted
    `true:` read by a plain YAML loader) and any case (`True:`) mean the same option."""
    out = {}
    for k, v in c.items():
        name = str(k).lower() if isinstance(k, bool) or str(k).lower() in ("true", "false") else k
        if name in out:
            raise ValueError(f"criteria: {name!r} given twice")
        out[name] = v
    return out


def parse_question(qid: str, raw: Any) -> QuestionSpec | QuestionError:
    """Validate one question. Errors read ``questions.<qid>.<field>: <why>``."""
    where = f"questions.{qid}"
    try:
        if isinstance(raw, str):
            raw = json.loads(raw, object_pairs_hook=no_duplicate_keys)
        if isinstance(raw, list) and raw and all(isinstance(p, tuple) for p in raw):
            raw = dict(raw)  # an Arrow map column
        if isinstance(raw, dict) and "criteria" in raw:
            c = raw["criteria"]
            if isinstance(c, str) and c[:1] in "[{":
                try:
                    c = json.loads(c, object_pairs_hook=no_duplicate_keys)
                except json.JSONDecodeError:
                    raise
                except ValueError as e:  # an option name twice
                    return QuestionError(qid, raw.get("type"), f"{where}.criteria: {e}")
            if isinstance(c, list) and c and all(isinstance(p, tuple) for p in c):  # an Arrow map column
                names = [p[0] for p in c]
                if len(set(names)) != len(names):
                    dup = next(n for n in names if names.count(n) > 1)
                    return QuestionError(
                        qid, raw.get("type"), f"{where}.criteria: duplicate option name {dup!r}"
                    )
                c = dict(c)
            if raw.get("type") == "noul" and isinstance(c, dict):
                try:
                    c = _noul_keys(c)
                except ValueError as e:
                    return QuestionError(qid, "noul", f"{where}.{e}")
            raw = {**raw, "criteria": c}
        if (problem := value_problem(raw)) is not None:
            t = raw.get("type") if isinstance(raw, dict) else None
            return QuestionError(qid, t if t in QUESTION_TYPES else None, f"{where}: {problem}")
        q = _Question.model_validate(raw)
    except json.JSONDecodeError as e:
        return QuestionError(qid, None, f"{where}: malformed JSON ({e.msg} at char {e.pos})")
    except ValidationError as e:
        t = raw.get("type") if isinstance(raw, dict) else None
        return QuestionError(qid, t if t in QUESTION_TYPES else None, _error_text(where, e))
    except ValueError as e:  # a key twice in the question's JSON text
        return QuestionError(qid, None, f"{where}: {e}")
    examples_texts = [
        e["text"] for e in q.examples or () if isinstance(e, dict) and isinstance(e.get("text"), str)
    ]
    texts = [q.instructions, *_criteria_texts(q.criteria), q.answer_lead or "", *examples_texts]
    if (n := sum(map(text_bytes, texts))) > MAX_QUESTION_BYTES:
        return QuestionError(
            qid, q.type, f"{where}: question text is {n:,} bytes, limit {MAX_QUESTION_BYTES:,}"
        )
    if q.type == "noul":
        c = q.criteria or {}
        names, descs = ("true", "false"), (c.get("true") or "Yes", c.get("false") or "No")
    elif q.type == "choice":
        names, descs = tuple(str(k) for k in q.criteria), tuple(q.criteria.values())
    else:
        names, descs = tuple(str(i) for i in range(len(q.criteria))), tuple(q.criteria)
    try:
        examples = _examples(q.examples, names)
    except ValueError as e:
        return QuestionError(qid, q.type, f"{where}.examples{e}")
    return QuestionSpec(qid, q.type, q.instructions, names, descs, q.answer_lead, examples)  # type: ignore[arg-type]


MAX_EXAMPLES = 16


def _examples(raw: list[Any] | None, names: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """`examples: [{text: ..., answer: <option name>}, …]` → ((text, option index), …). A noul answer may
    be a boolean, a score answer the level's number. Raises ValueError with `[i].field: why`."""
    out = []
    for i, ex in enumerate(raw or ()):
        if not isinstance(ex, dict) or set(ex) != {"text", "answer"}:
            raise ValueError(f"[{i}]: expected an object with 'text' and 'answer'")
        if not isinstance(ex["text"], str) or not ex["text"].strip():
            raise ValueError(f"[{i}].text: must be a non-empty string")
        a = ex["answer"]
        a = str(a).lower() if isinstance(a, bool) else str(a)
        if a not in names:
            raise ValueError(f"[{i}].answer: {ex['answer']!r} is not an option ({', '.join(names)})")
        out.append((ex["text"], names.index(a)))
    if len(out) > MAX_EXAMPLES:
        raise ValueError(f": at most {MAX_EXAMPLES} examples a question, got {len(out)}")
    return tuple(out)


def _criteria_texts(c: Any) -> list[str]:
    if isinstance(c, dict):
        return [str(x) for kv in c.items() for x in kv if x is not None]
    return [x for x in c or () if isinstance(x, str)]


def parse_questions(raw: Any) -> tuple[QuestionSpec | QuestionError, ...]:
    """Validate a question map. Raises ValueError (message without the row) when the map itself is bad."""
    d = _pairs_to_dict(raw, "questions")
    d = {k: v for k, v in d.items() if v is not None}  # struct columns add null fields of other rows
    if not d:
        raise ValueError("no questions")
    if len(d) > MAX_QUESTIONS:
        raise ValueError(f"{len(d)} questions; at most {MAX_QUESTIONS} a row")
    if any(not str(k).strip() for k in d):
        raise ValueError("a question id is empty")
    for k in d:
        if (problem := value_problem(str(k))) is not None or len(str(k)) > MAX_ID_CHARS:
            shown = repr(str(k)[:40])
            raise ValueError(f"question id {shown}: {problem or f'longer than {MAX_ID_CHARS:,} characters'}")
    return tuple(parse_question(str(k), v) for k, v in d.items())


_JSON_CONVERSATION = re.compile(r'^(\{\s*"messages"|\[\s*\{\s*")')


def parse_state(raw: Any) -> tuple[tuple[Message, ...], bool]:
    """`state` → (messages, plain). Accepts a string, a JSON string of a message list or of
    ``{"messages": [...]}``, or those structures. Raises ValueError naming the sub-field.

    A string that starts with `{` or `[` is read as JSON when it parses to a conversation (a list of objects,
    or an object with `messages`); malformed JSON is an error only when the string starts like one
    (`{"messages"` or `[{"`). Any other string is the text of one user message, also one that begins with
    `{` or `[` ("{name} wrote: …", "[URGENT] …", "[1, 2] are my orders")."""
    if isinstance(raw, str) and (n := text_bytes(raw)) > MAX_STATE_BYTES:
        raise ValueError(f"{n:,} bytes of text, limit {MAX_STATE_BYTES:,}")
    if isinstance(raw, str):
        s = raw.strip()
        if s[:1] in "[{":
            try:
                parsed = json.loads(s, object_pairs_hook=no_duplicate_keys)
            except json.JSONDecodeError as e:
                if _JSON_CONVERSATION.match(s):
                    raise ValueError(f"malformed JSON ({e.msg} at char {e.pos})") from None
                parsed = None
            except ValueError:  # a key twice: a conversation's message would keep its last role/content
                if _JSON_CONVERSATION.match(s):
                    raise
                parsed = None
            is_conversation = (isinstance(parsed, dict) and "messages" in parsed) or (
                isinstance(parsed, list) and all(isinstance(m, dict) for m in parsed)
            )
            if is_conversation:
                if (problem := value_problem(parsed)) is not None:
                    raise ValueError(problem)
                raw = parsed
        if isinstance(raw, str):
            if not s:
                raise ValueError("empty conversation")
            return (Message("user", raw),), True
    if isinstance(raw, dict):
        if set(raw) != {"messages"}:
            raise ValueError(f"expected an object with only 'messages', got keys {sorted(raw)}")
        raw = raw["messages"]
    if not isinstance(raw, list):
        raise ValueError(
            f"expected a string, a list of messages or {{'messages': [...]}}, got {type(raw).__name__}"
        )
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
        if not isinstance(m["content"], str):
            raise ValueError(f"messages[{i}].content: expected a string")
        out.append(Message(m["role"], m["content"]))
    if not any(m.content.strip() for m in out):
        raise ValueError("empty conversation")
    if (n := sum(text_bytes(m.content) for m in out)) > MAX_STATE_BYTES:
        raise ValueError(f"{n:,} bytes of message text, limit {MAX_STATE_BYTES:,}")
    return tuple(out), False


def row_id(raw: Any, pos: int) -> tuple[str, str | None]:
    """The output id of an input row: a string as given, an integer (or an integral float, as Parquet float
    columns hold them) as its digits, null → the 0-based index. Returns (id, None) or ("", problem) for an
    empty string or another type (bool, list, 1.5, …), which would otherwise become Python reprs."""
    if raw is None:
        return str(pos), None
    if isinstance(raw, str):
        return (raw, None) if raw.strip() else ("", "empty")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw), None
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw)), None
    return "", f"expected a string or an integer, got {type(raw).__name__} {raw!r}"


def checked_row_id(raw: Any, pos: int) -> tuple[str, str | None]:
    """`row_id` after the value checks every readout applies to an id: a lone surrogate or an undecodable
    cell (the id is written to every output row and error), a string over MAX_ID_CHARS."""
    problem = value_problem(raw)
    if problem is None and isinstance(raw, str) and len(raw) > MAX_ID_CHARS:
        problem = f"longer than {MAX_ID_CHARS:,} characters"
    return ("", problem) if problem else row_id(raw, pos)


def kept_values(rec: dict[str, Any], keep: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """The `--keep` values of a record and the first problem among them (`<column>: why`), or None. A kept
    value that Arrow cannot hold (value_problem) is the row's error and is written as null."""
    kept = {k: rec.get(k) for k in keep}
    problems = {k: p for k, v in kept.items() if (p := value_problem(v, ints=True)) is not None}
    if not problems:
        return kept, None
    k, p = next(iter(problems.items()))
    return {k: (None if k in problems else v) for k, v in kept.items()}, f"{k}: {p}"


def text_field(rec: dict[str, Any], name: str) -> str:
    """The string field `name` of a record (not empty, encodable, at most MAX_STATE_BYTES as `state`);
    raises ValueError `name: why`, with the type named as the user wrote it (an undecodable cell says why,
    not which class stands in for it)."""
    v = rec.get(name)
    if v is None:
        raise ValueError(f"{name}: missing")
    if (problem := value_problem(v)) is not None:
        raise ValueError(f"{name}: {problem}")
    if not isinstance(v, str):
        raise ValueError(f"{name}: expected a string, got {type(v).__name__}")
    if (n := text_bytes(v)) > MAX_STATE_BYTES:  # refused before the tokenizer: 3 MB took 1.2 GB there
        raise ValueError(f"{name}: {n:,} bytes of text, limit {MAX_STATE_BYTES:,}")
    if not v.strip():
        raise ValueError(f"{name}: empty")
    return v


def ids_and_types(questions: Any) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """(question ids, question types) of parsed questions (specs or errors), aligned; () for None."""
    qs = tuple(questions or ())
    return tuple(q.qid for q in qs), tuple(q.type for q in qs)


def unidentified_row_error(
    pos: int, why: str, shared_questions: Any = None, kept: dict[str, Any] | None = None
) -> RowError:
    """The error row of an input row whose id cannot be used (an unreadable line, a bool/list/empty id):
    `id` null, since its index could clash with a real id; named by its 0-based index. With shared
    (`-q`) questions it keeps their ids and types, so it still writes one output row per question."""
    qids, qtypes = ids_and_types(shared_questions)
    return RowError(pos, None, f"row at index {pos}: {why}", qids, kept or {}, qtypes)


def duplicate_id_error(rid: str, first: int, pos: int) -> str:
    """The error of a row whose id an earlier row (0-based index `first`) already used."""
    return (
        f"row {rid}: id: duplicate id {rid!r}, first used by the row at index {first}"
        f" (this row's index: {pos}; a missing or null id is the row's index)"
    )


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


def parse_row(
    pos: int, rec: dict[str, Any], shared_questions: Any = None, keep: tuple[str, ...] = ()
) -> Row | RowError:
    """One input record → Row or RowError (never raises). `shared_questions` is the parsed
    ``--questions`` file, used when given; otherwise the row's own `questions` field.

    Length (over ~60 lines): every check of one row in the order its error message names them.
    """
    kept, kept_problem = kept_values(rec, keep)
    rid, id_problem = checked_row_id(rec.get("id"), pos)
    if id_problem:
        return unidentified_row_error(pos, f"id: {id_problem}", shared_questions, kept)
    qids: tuple[str, ...] = ()
    try:
        if shared_questions is not None:
            questions = shared_questions
        elif "questions" not in rec or rec["questions"] is None:
            return RowError(
                pos,
                rid,
                f"row {rid}: questions: missing (give a questions column or --questions FILE)",
                kept=kept,
            )
        else:
            try:
                questions = parse_questions(rec["questions"])
            except RecursionError:
                return RowError(pos, rid, f"row {rid}: questions: JSON nested too deeply", kept=kept)
            except json.JSONDecodeError as e:
                return RowError(
                    pos, rid, f"row {rid}: questions: malformed JSON ({e.msg} at char {e.pos})", kept=kept
                )
            except ValueError as e:
                return RowError(pos, rid, f"row {rid}: questions: {e}", kept=kept)
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
    except Exception as e:  # a bad row never sinks the job
        return RowError(pos, rid, f"row {rid}: {type(e).__name__}: {e}", qids, kept)
    qs = tuple(
        q if isinstance(q, QuestionSpec) else QuestionError(q.qid, q.type, f"row {rid}: {q.error}")
        for q in questions
    )
    return Row(pos, rid, messages, plain, qs, kept)


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: plain json.loads keeps the last of two equal keys silently (two options with
    one name would merge); raise instead, naming the key."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r} in a JSON object")
    return d
