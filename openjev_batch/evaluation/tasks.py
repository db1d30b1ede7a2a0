"""Benchmark formats, each one declaration in TASKS: the columns that identify it, its question kind, and how
one record becomes an `Item`. Adding a format is adding a `Task` here (detection order is TASKS order).

- ``mmlu-pro``  question_id, question, options (≤ 10), answer (letter), answer_index, category, src
- ``mmlu``      question, subject, choices, answer (0-based index); id = ``<subject>-<k>`` (k-th of its subject)
- ``boolq``     question, passage, answer (bool)
- ``noul``      the product's own input (``state``, ``questions`` with one noul question) + a gold ``label``
                (bool, or true/false/yes/no)
- ``nli``       premise, hypothesis, gold ``label`` (or ``gold``) — read by a classifier head
- ``text-classification``  text, gold ``label`` (or ``gold``) — read by a classifier head

The classifier-head formats (`Task.readout`) are scored against the checkpoint's own labels (its config.json
``id2label``, no weights): a gold label is a label name, matched case-insensitively (``Entailment`` is
``entailment``), or an int, the model's label index. A gold label the model does not have refuses the whole
eval (ValueError → ConfigError naming the row, the label and the model's labels): a benchmark whose labels
differ from the head's (RTE's ``not_entailment`` against a 3-way head) must be mapped first, not scored
short. An int means the *model's* index: a dataset whose ints name other labels (MNLI: 0 = entailment)
should give the names. The category of a classification item is its gold label's name (accuracy per gold
label: each label's recall).

Reproducible subsets: a question's rank is sha256("<seed>:<id>"); ``--sample N`` keeps the N lowest
(independent of library versions and file order; a smaller sample is a subset of a larger one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..readouts import CLASSIFIER_HEAD, LABEL_LOGPROBS
from ..values import kind_of, special_file_problem

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MULTIPLE_CHOICE, YES_NO, CLASSIFICATION = "multiple choice", "yes/no", "classification"


@dataclass(frozen=True)
class Item:
    """One benchmark question. `gold` indexes `options` (yes/no: 0 = true, 1 = false; classification: the
    model's labels); `question` is the question text, or for yes/no sets the product's question object;
    `context` the yes/no row's state; `fields` a classification row's text (premise + hypothesis, or text)."""

    id: str
    question: Any
    options: tuple[str, ...]
    gold: int
    category: str
    context: Any = None
    fields: dict[str, Any] | None = None


@dataclass(frozen=True)
class Task:
    """A benchmark format. `item(record, row_index, seen, labels)` builds one Item (raising KeyError/
    TypeError/ValueError/IndexError for a bad record); `seen` counts the rows of each category so far;
    `labels` are the model's (classifier-head formats; empty for the others). `readout`: what answers it."""

    name: str
    columns: frozenset[str]
    kind: str
    item: Callable[[dict, int, dict[str, int], tuple[str, ...]], Item]
    readout: str = LABEL_LOGPROBS


def _bool(v: Any, where: str) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "yes", "1"):
        return True
    if s in ("false", "no", "0"):
        return False
    raise ValueError(f"{where}: expected a yes/no label, got {v!r}")


def _as_question(text: str) -> str:
    """BoolQ's 'is x y' → 'Is x y?' (as examples/make_real_data.py does)."""
    t = " ".join(text.split())
    return (t[:1].upper() + t[1:]).rstrip(" .?") + "?" if t else t


def _text(r: dict, key: str) -> str:
    """Column `key` of a benchmark row, which must be text: a null or a number ended `eval` in an
    AttributeError traceback (issue 34.17). Raises ValueError naming the column."""
    v = r[key]
    if not isinstance(v, str):
        raise ValueError(f"{key}: expected text, got {kind_of(v)}")
    return v


def _options(r: dict, key: str) -> tuple[Any, ...]:
    """Column `key`, the options: a list (a string "ab" was read as the two options a and b, issue 34.18)."""
    v = r[key]
    if isinstance(v, str) or not isinstance(v, list | tuple):
        raise ValueError(f"{key}: expected a list of options, got {kind_of(v)}")
    for j, o in enumerate(v):
        # a null option was shown as the option "None" (issue 42.7); a number is its text (MMLU's "4")
        if not isinstance(o, str) and (isinstance(o, bool) or not isinstance(o, int | float)):
            raise ValueError(f"{key}: option {j + 1} is {kind_of(o)}, not text")
    return tuple(o if isinstance(o, str) else str(o) for o in v)


def _name(r: dict, key: str) -> str:
    """Column `key`, a name (a category, a question id): text or a number. A null was the name "None",
    one category with every other null (issue 42.7). Raises ValueError naming the column."""
    v = r[key]
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    raise ValueError(f"{key}: expected text, got {kind_of(v)}")


def _index(v: Any, key: str) -> int:
    """Column `key`, the correct option's 0-based index (a whole number, or text holding one). Raises
    ValueError in words (issue 48.8: `answer: null` read `int() argument must be …`)."""
    whole = isinstance(v, int) or (isinstance(v, float) and v.is_integer()) or (isinstance(v, str) and v.isdigit())
    if isinstance(v, bool) or not whole:
        raise ValueError(f"{key}: expected the correct option's index (0, 1, …), got {kind_of(v)}")
    return int(v)


def _id(r: dict, default: str) -> str:
    return str(r["id"]) if r.get("id") not in (None, "") else default


def _mmlu_pro(r: dict, i: int, seen: dict[str, int], labels: tuple[str, ...]) -> Item:
    gold = r.get("answer_index")
    if gold is None:
        gold = LETTERS.index(str(r["answer"]).strip().upper())
    elif r.get("answer") is not None and LETTERS[_index(gold, "answer_index")] != str(r["answer"]).strip().upper():
        raise ValueError(f"answer {r['answer']!r} disagrees with answer_index {gold}")
    qid, cat = _name(r, "question_id"), _name(r, "category")
    return Item(qid, _text(r, "question"), _options(r, "options"), _index(gold, "answer_index"), cat)


def _mmlu(r: dict, i: int, seen: dict[str, int], labels: tuple[str, ...]) -> Item:
    cat = _name(r, "subject")
    k = seen[cat] = seen.get(cat, -1) + 1
    return Item(_id(r, f"{cat}-{k:04d}"), _text(r, "question"), _options(r, "choices"), _index(r["answer"], "answer"), cat)


def _boolq(r: dict, i: int, seen: dict[str, int], labels: tuple[str, ...]) -> Item:
    gold = 0 if _bool(r["answer"], f"row {i}.answer") else 1
    q = {"type": "noul", "instructions": _as_question(_text(r, "question"))}
    return Item(_id(r, f"{i:05d}"), q, ("true", "false"), gold, "boolq", _text(r, "passage"))


def _noul(r: dict, i: int, seen: dict[str, int], labels: tuple[str, ...]) -> Item:
    qs = r["questions"]
    qs = json.loads(qs) if isinstance(qs, str) else qs
    if not isinstance(qs, dict) or len(qs) != 1:
        raise ValueError("noul format needs exactly one question per row")
    (q,) = qs.values()
    gold = 0 if _bool(r["label"], f"row {i}.label") else 1
    return Item(_id(r, str(i)), q, ("true", "false"), gold, str(r.get("category") or "all"), r["state"])


def gold_index(v: Any, labels: tuple[str, ...], where: str) -> int:
    """A classification gold label → its index in the model's `labels`: a name (exact, else the one label
    equal to it case-insensitively) or an int index. Raises ValueError naming the label and the labels."""
    if isinstance(v, int) and not isinstance(v, bool):
        if 0 <= v < len(labels):
            return v
    elif isinstance(v, str):
        if v in labels:
            return labels.index(v)
        same = [j for j, x in enumerate(labels) if x.casefold() == v.strip().casefold()]
        if len(same) == 1:
            return same[0]
    raise ValueError(
        f"gold label {v!r} (column {where}) is not one of the model's labels ({', '.join(labels)}); give a label "
        f"name (case-insensitive) or its index 0…{len(labels) - 1}"
    )


def _gold(r: dict, labels: tuple[str, ...]) -> int:
    if "label" in r and "gold" in r:
        raise ValueError("both label and gold columns: give the gold label in one")
    if "label" not in r and "gold" not in r:
        raise ValueError("no gold label: give it in a label (or gold) column")
    col = "label" if "label" in r else "gold"
    return gold_index(r[col], labels, col)


def _classified(fields: tuple[str, ...]) -> Callable[[dict, int, dict[str, int], tuple[str, ...]], Item]:
    """The item function of a classifier-head format reading the text columns `fields`."""

    def item(r: dict, i: int, seen: dict[str, int], labels: tuple[str, ...]) -> Item:
        gold = _gold(r, labels)
        return Item(_id(r, f"{i:05d}"), None, labels, gold, labels[gold], fields={f: r[f] for f in fields})

    return item


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("mmlu-pro", frozenset({"question", "options", "answer"}), MULTIPLE_CHOICE, _mmlu_pro),
        Task("mmlu", frozenset({"question", "choices", "answer"}), MULTIPLE_CHOICE, _mmlu),
        Task("boolq", frozenset({"question", "passage", "answer"}), YES_NO, _boolq),
        Task("noul", frozenset({"state", "questions", "label"}), YES_NO, _noul),
        Task(
            "nli",
            frozenset({"premise", "hypothesis"}),
            CLASSIFICATION,
            _classified(("premise", "hypothesis")),
            CLASSIFIER_HEAD,
        ),
        Task(
            "text-classification",
            frozenset({"text"}),
            CLASSIFICATION,
            _classified(("text",)),
            CLASSIFIER_HEAD,
        ),
    )
}
FORMATS = tuple(TASKS)


def read_records(path: str | Path) -> list[dict]:
    """Parquet (.parquet/.pq) or JSONL (.jsonl/.ndjson) → list of dicts. Raises ValueError otherwise."""
    path = Path(path)
    if problem := special_file_problem(path):  # eval reads it more than once (rows, then its sha256)
        raise ValueError(problem)
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    raise ValueError(f"{path}: use a .parquet or .jsonl benchmark file")


def detect_format(rec: dict) -> str:
    for task in TASKS.values():
        if task.columns <= set(rec):
            return task.name
    raise ValueError(f"cannot tell the benchmark format from columns {sorted(rec)}; pass --format")


def to_items(
    records: list[dict], fmt: str = "auto", labels: Callable[[], tuple[str, ...]] | None = None
) -> tuple[list[Item], str]:
    """Benchmark records → Items (and the format used). `labels()`: the model's labels, asked only for a
    classifier-head format. Raises ValueError naming the bad row."""
    if not records:
        raise ValueError("the benchmark file has no rows")
    fmt = detect_format(records[0]) if fmt == "auto" else fmt
    if fmt not in TASKS:
        raise ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    task, items = TASKS[fmt], []
    seen: dict[str, int] = {}
    model_labels: tuple[str, ...] = ()
    if task.readout == CLASSIFIER_HEAD:
        if labels is None:
            raise ValueError(f"format {fmt} is scored against a classifier's labels: give the model's labels")
        try:
            model_labels = tuple(labels())
        except ValueError as e:
            raise ValueError(f"format {fmt}: {e}") from None
    for i, r in enumerate(records):
        try:
            it = task.item(r, i, seen, model_labels)
        except KeyError as e:  # was `KeyError: 'subject'` (issue 42)
            raise ValueError(f"row {i} ({fmt}): no {e.args[0]!r} field (format {fmt} needs it)") from None
        except (TypeError, ValueError, IndexError) as e:
            raise ValueError(f"row {i} ({fmt}): {e}") from None
        if not 0 <= it.gold < len(it.options):
            raise ValueError(f"row {i}: gold index {it.gold} outside {len(it.options)} options")
        items.append(it)
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("question ids are not unique")
    return items, fmt


def rank(seed: int, key: str) -> bytes:
    return hashlib.sha256(f"{seed}:{key}".encode()).digest()


def sample(items: list[Item], n: int | None, seed: int) -> list[Item]:
    """The n items with the lowest sha256("<seed>:<id>"), in their original order (all when n is None)."""
    if n is None or n >= len(items):
        return list(items)
    keep = set(sorted(range(len(items)), key=lambda i: rank(seed, items[i].id))[:n])
    return [it for i, it in enumerate(items) if i in keep]
