"""The label readout's questions: a row's `questions` cell or the `--questions` file, validated into
`QuestionSpec`s; a bad question is a `QuestionError` naming its field, never an exception past the row.
Every message names the question and the field, e.g. ``questions.urgency.criteria: score needs 2–64 levels,
got 1`` (rows.py adds the row id)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ...core import MAX_ID_CHARS
from ...errors import ConfigError
from ...values import kind_of, no_duplicate_keys, text_bytes, value_problem
from .question_schema import QUESTION_TYPES, _Question

MAX_QUESTIONS = 64
# a question without instructions (absent or null) is asked with the seed's default
DEFAULT_INSTRUCTIONS = "Answer using the options below."
# 256 KiB of question text is ~2× a 32,768-token branch (refused before any tokenization, as the state is).
MAX_QUESTION_BYTES = 256 * 2**10
# A --questions file: all MAX_QUESTIONS questions at their text limit, twice over for markup and escapes.
MAX_QUESTIONS_FILE_BYTES = 2 * MAX_QUESTIONS * MAX_QUESTION_BYTES


@dataclass(frozen=True)
class QuestionSpec:
    """One validated question. `options` are the names reported in the output (noul: true/false;
    score: "0".."K-1"); `descriptions[i]` is what the model reads for option i (None: name only)."""

    qid: str
    type: Literal["noul", "choice", "score", "multi"]
    instructions: str
    options: tuple[str, ...]  # multi: the label names
    descriptions: tuple[str | None, ...]
    # what the assistant turn starts with before the label ("Answer:" when None)
    answer_lead: str | None = None
    # worked examples shown before the row's text: (example text, index of its option)
    examples: tuple[tuple[str, int], ...] = ()
    # multi: a label is chosen when its P(yes) is at least this
    threshold: float | None = None
    # choice / score: the options are also shown in debias − 1 more cyclic orders (items.py); None: the job's
    # --debias-order
    debias: int | None = None


@dataclass(frozen=True)
class QuestionError:
    qid: str
    type: str | None
    error: str


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
        raise ValueError(f"expected an object mapping question_id → question, got {kind_of(v)}")
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
        named = msg.startswith(
            ("criteria", "threshold:", "debias:", "examples:")
        )  # a model-level check's field
        if loc and not named:
            parts.append(f"{where}.{loc}: {msg}")
        else:
            parts.append(f"{where}.{msg}" if named else f"{where}: {msg}")
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


def _with_criteria(qid: str, raw: dict, where: str) -> dict | QuestionError:
    """`raw` with its criteria as a mapping: a JSON text (a CSV cell) parsed, an Arrow map column's pairs
    made a dict (a name twice refused, not the last kept), noul keys as `true`/`false`. Raises
    json.JSONDecodeError for a malformed JSON text."""
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
            return QuestionError(qid, raw.get("type"), f"{where}.criteria: duplicate option name {dup!r}")
        c = dict(c)
    if raw.get("type") == "noul" and isinstance(c, dict):
        try:
            c = _noul_keys(c)
        except ValueError as e:
            return QuestionError(qid, "noul", f"{where}.{e}")
    if isinstance(c, dict):
        if dup := _same_text(c):  # the Python API's {1: "one", "1": "uno"}: two options named "1" (issue 42)
            both = " and ".join(repr(k) for k in c if str(k) == dup)
            return QuestionError(qid, raw.get("type"), f"{where}.criteria: option name {dup!r} given twice (as {both})")
        if bad := next((k for k in c if name_problem(str(k))), None):
            return QuestionError(qid, raw.get("type"), f"{where}.criteria: option {str(bad)[:40]!r}: {name_problem(str(bad))}")
    elif isinstance(c, list) and raw.get("type") in ("choice", "multi"):
        if (dup := _same_text(c)) and sum(str(k) == dup for k in c) > 1:
            return QuestionError(qid, raw.get("type"), f"{where}.criteria: option name {dup!r} given twice")
        if bad := next((k for k in c if isinstance(k, str) and name_problem(k)), None):
            return QuestionError(qid, raw.get("type"), f"{where}.criteria: option {bad[:40]!r}: {name_problem(bad)}")
    return {**raw, "criteria": c}


def parse_question(qid: str, raw: Any) -> QuestionSpec | QuestionError:
    """Validate one question. Errors read ``questions.<qid>.<field>: <why>``."""
    where = f"questions.{qid}"
    try:
        if isinstance(raw, str):
            raw = json.loads(raw, object_pairs_hook=no_duplicate_keys)
        if isinstance(raw, list) and raw and all(isinstance(p, tuple) for p in raw):
            raw = dict(raw)  # an Arrow map column
        if isinstance(raw, dict) and "criteria" in raw:
            raw = _with_criteria(qid, raw, where)
            if isinstance(raw, QuestionError):
                return raw
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
    instructions = shown_text(q.instructions)
    texts = [instructions or "", *_criteria_texts(q.criteria), q.answer_lead or "", *examples_texts]
    if (n := sum(map(text_bytes, texts))) > MAX_QUESTION_BYTES:
        return QuestionError(
            qid, q.type, f"{where}: question text is {n:,} bytes, limit {MAX_QUESTION_BYTES:,}"
        )
    names: tuple[str, ...]
    descs: tuple[str | None, ...]
    if q.type == "noul":
        c = q.criteria or {}
        names, descs = ("true", "false"), (shown_text(c.get("true")) or "Yes", shown_text(c.get("false")) or "No")
    elif q.type in ("choice", "multi"):
        names, descs = tuple(str(k) for k in q.criteria), tuple(map(shown_text, q.criteria.values()))
    else:
        names, descs = tuple(str(i) for i in range(len(q.criteria))), tuple(map(shown_text, q.criteria))
    try:
        examples = _examples(q.examples, names)
    except ValueError as e:
        return QuestionError(qid, q.type, f"{where}.examples{e}")
    return QuestionSpec(
        qid, q.type, instructions or DEFAULT_INSTRUCTIONS, names, descs, q.answer_lead, examples,  # type: ignore[arg-type]
        threshold=0.5 if q.type == "multi" and q.threshold is None else q.threshold, debias=q.debias,
    )  # fmt: skip


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
        return [str(k) for k in c] + [shown_text(x) or "" for x in c.values()]
    return [shown_text(x) or "" for x in c or ()]


def shown_text(v: Any) -> str | None:
    """An instruction or description as the model reads it: text as it is, a JSON object or array as compact
    JSON (as the seed serializes it), None as None."""
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


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
        problem = value_problem(str(k)) or name_problem(str(k))
        if problem is not None or len(str(k)) > MAX_ID_CHARS:
            shown = repr(str(k)[:40])
            raise ValueError(f"question id {shown}: {problem or f'longer than {MAX_ID_CHARS:,} characters'}")
    if dup := _same_text(d):  # the Python API's {1: …, "1": …}: two questions of one id
        raise ValueError(f"question id {dup!r} given twice (as {' and '.join(repr(k) for k in d if str(k) == dup)})")
    return tuple(parse_question(str(k), v) for k, v in d.items())


def name_problem(name: str) -> str | None:
    """Why a question id or option name cannot name anything in a report: a line break or another control
    character added lines to the summary, the answers table and report.md (issue 42)."""
    if bad := next((c for c in name if unicodedata.category(c) == "Cc"), None):
        return f"holds a control character ({bad!r}); ids and option names are one line of text"
    return None


def _same_text(d: Iterable[Any]) -> str | None:
    """A text two of the keys of `d` (or its items) share once written as text (`1` and `"1"`), else None."""
    seen: set[str] = set()
    for k in d:
        if str(k) in seen:
            return str(k)
        seen.add(str(k))
    return None


def load_questions(path: Path) -> tuple[QuestionSpec, ...]:
    """Read a `--questions` file (JSON or YAML mapping question_id → question); every question must be
    valid. Raises ConfigError with each question's problem."""
    from ...data_files import load_data_file  # lazy: yaml, keeps --help fast (the readouts load at --help)

    why = f"more than {MAX_QUESTIONS} questions at their text limit hold"
    raw = load_data_file(path, "--questions", MAX_QUESTIONS_FILE_BYTES, why)
    if not isinstance(raw, dict):  # a plain string would be read as the JSON text of a map (a row's cell)
        got = "nothing" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(
            f"--questions {path}: the YAML/JSON questions file must be a mapping question_id → question, "
            f"got {got}"
        )
    return shared_questions(raw, f"--questions {path}")


def shared_questions(raw: Any, source: str) -> tuple[QuestionSpec, ...]:
    """A question map applied to every row (a `--questions` file's content, or the Python API's mapping):
    every question must be valid. Raises ConfigError naming `source` and each question's problem."""
    try:
        qs = parse_questions(raw)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None
    bad = [q.error for q in qs if isinstance(q, QuestionError)]
    if bad:
        raise ConfigError(f"{source}: " + "; ".join(bad))
    return qs  # type: ignore[return-value]
