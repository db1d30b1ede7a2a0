"""Benchmark formats, each one declaration in TASKS: the columns that identify it, its question kind, and how
one record becomes an `Item`. Adding a format is adding a `Task` here (detection order is TASKS order).

- ``mmlu-pro``  question_id, question, options (≤ 10), answer (letter), answer_index, category, src
- ``mmlu``      question, subject, choices, answer (0-based index); id = ``<subject>-<k>`` (k-th of its subject)
- ``boolq``     question, passage, answer (bool)
- ``noul``      the product's own input (``state``, ``questions`` with one noul question) + a gold ``label``
                (bool, or true/false/yes/no)

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

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MULTIPLE_CHOICE, YES_NO = "multiple choice", "yes/no"


@dataclass(frozen=True)
class Item:
    """One benchmark question. `gold` indexes `options` (yes/no: 0 = true, 1 = false); `question` is the
    question text, or for yes/no sets the product's question object; `context` the yes/no row's state."""

    id: str
    question: Any
    options: tuple[str, ...]
    gold: int
    category: str
    context: Any = None


@dataclass(frozen=True)
class Task:
    """A benchmark format. `item(record, row_index, seen)` builds one Item (raising KeyError/TypeError/
    ValueError/IndexError for a bad record); `seen` counts the rows of each category so far."""

    name: str
    columns: frozenset[str]
    kind: str
    item: Callable[[dict, int, dict[str, int]], Item]


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


def _id(r: dict, default: str) -> str:
    return str(r["id"]) if r.get("id") not in (None, "") else default


def _mmlu_pro(r: dict, i: int, seen: dict[str, int]) -> Item:
    gold = r.get("answer_index")
    if gold is None:
        gold = LETTERS.index(str(r["answer"]).strip().upper())
    elif r.get("answer") is not None and LETTERS[int(gold)] != str(r["answer"]).strip().upper():
        raise ValueError(f"answer {r['answer']!r} disagrees with answer_index {gold}")
    return Item(str(r["question_id"]), r["question"], tuple(r["options"]), int(gold), str(r["category"]))


def _mmlu(r: dict, i: int, seen: dict[str, int]) -> Item:
    cat = str(r["subject"])
    k = seen[cat] = seen.get(cat, -1) + 1
    return Item(_id(r, f"{cat}-{k:04d}"), r["question"], tuple(r["choices"]), int(r["answer"]), cat)


def _boolq(r: dict, i: int, seen: dict[str, int]) -> Item:
    gold = 0 if _bool(r["answer"], f"row {i}.answer") else 1
    q = {"type": "noul", "instructions": _as_question(r["question"])}
    return Item(_id(r, f"{i:05d}"), q, ("true", "false"), gold, "boolq", r["passage"])


def _noul(r: dict, i: int, seen: dict[str, int]) -> Item:
    qs = r["questions"]
    qs = json.loads(qs) if isinstance(qs, str) else qs
    if not isinstance(qs, dict) or len(qs) != 1:
        raise ValueError("noul format needs exactly one question per row")
    (q,) = qs.values()
    gold = 0 if _bool(r["label"], f"row {i}.label") else 1
    return Item(_id(r, str(i)), q, ("true", "false"), gold, str(r.get("category") or "all"), r["state"])


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("mmlu-pro", frozenset({"question", "options", "answer"}), MULTIPLE_CHOICE, _mmlu_pro),
        Task("mmlu", frozenset({"question", "choices", "answer"}), MULTIPLE_CHOICE, _mmlu),
        Task("boolq", frozenset({"question", "passage", "answer"}), YES_NO, _boolq),
        Task("noul", frozenset({"state", "questions", "label"}), YES_NO, _noul),
    )
}
FORMATS = tuple(TASKS)


def read_records(path: str | Path) -> list[dict]:
    """Parquet (.parquet/.pq) or JSONL (.jsonl/.ndjson) → list of dicts. Raises ValueError otherwise."""
    path = Path(path)
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


def to_items(records: list[dict], fmt: str = "auto") -> tuple[list[Item], str]:
    """Benchmark records → Items (and the format used). Raises ValueError naming the bad row."""
    if not records:
        raise ValueError("the benchmark file has no rows")
    fmt = detect_format(records[0]) if fmt == "auto" else fmt
    if fmt not in TASKS:
        raise ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    task, items, seen = TASKS[fmt], [], {}
    for i, r in enumerate(records):
        try:
            it = task.item(r, i, seen)
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"row {i} ({fmt}): {type(e).__name__}: {e}") from None
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
