"""Benchmark items → the product's input rows (one question `answer` each, plus the kept `gold`/`category`).

Nothing here prompts or prefills: the rows are ordinary input for `run`, which answers them.

Multiple-choice prompt: the row's ``state`` is the prefix shared by every question of a category —
zero-shot ``The following is a multiple choice question about <category>.``; with ``shots=k`` the first k
rows of that category in the dev split, worked in the product's own layout (``Question: …`` /
``Options:`` / ``A. …`` / ``Answer: B``). The question is a ``choice`` question whose option *names* are
the option texts with no description, so the product prints ``A. <option text>`` (names ``A``/``opt0``
with the text as description would print ``A. A: <text>``). Option names must be unique: a repeated text
gets `` (2)``, `` (3)``… (9 of MMLU's 14,042 test questions), an empty one ``(empty)``.

Classification (the classifier-head formats): the row is the item's text fields as they are (``premise`` +
``hypothesis``, or ``text``), which the classifier-head readout renders through its template; `gold` is the
model's label index. There is no prompt of eval's own here, so ``--shots``/``--dev``/``--system-prompt``
are refused for these formats rather than ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError, os_error_text
from .tasks import CLASSIFIER_HEAD, LETTERS, TASKS, YES_NO, Item, read_records, sample, to_items

KEEP = ("gold", "category")  # input columns every eval row carries into predictions.parquet


def option_names(options: tuple[str, ...]) -> list[str]:
    """Option texts as unique, non-empty choice names (a repeat gets ' (2)', …; empty → '(empty)')."""
    out: list[str] = []
    seen: dict[str, int] = {}
    for o in options:
        name = str(o).strip() or "(empty)"
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def _topic(category: str) -> str:
    return category.replace("_", " ")


def fewshot_blocks(categories: set[str], dev: list[Item] | None, shots: int) -> dict[str, str]:
    """category → the shared prefix text (zero-shot line, or the first `shots` dev rows worked)."""
    blocks = {}
    for cat in sorted(categories):
        if shots <= 0 or not dev:
            blocks[cat] = f"The following is a multiple choice question about {_topic(cat)}."
            continue
        ex = [d for d in dev if d.category == cat][:shots]
        parts = [f"The following are multiple choice questions (with answers) about {_topic(cat)}."]
        for d in ex:
            lines = [f"Question: {d.question.strip()}", "Options:"]
            lines += [f"{LETTERS[j]}. {n}" for j, n in enumerate(option_names(d.options))]
            parts.append("\n".join([*lines, f"Answer: {LETTERS[d.gold]}"]))
        blocks[cat] = "\n\n".join(parts)
    return blocks


def build_rows(items: list[Item], blocks: dict[str, str]) -> list[dict]:
    """Items → the product's input rows (one question `answer` each, plus the `gold`/`category` kept columns)."""
    rows = []
    for it in items:
        if it.fields is not None:  # classification: the readout's own input columns
            rows.append({"id": it.id, **it.fields, "gold": it.gold, "category": it.category})
            continue
        if it.context is not None:  # yes/no
            state, q = it.context, it.question
        else:
            state = blocks[it.category]
            q = {
                "type": "choice",
                "instructions": it.question.strip(),
                "criteria": dict.fromkeys(option_names(it.options)),
            }
        rows.append(
            {
                "id": it.id,
                "state": state,
                "questions": {"answer": q},
                "gold": it.gold,
                "category": it.category,
            }
        )
    return rows


def refuse_for_classifier(fmt: str, shots: int, dev: Path | None, system_prompt: str | None) -> None:
    """The prompt options of the label-logprobs formats, refused for a classifier-head one (its prompt is the
    readout's template over the row's text: nothing to put worked examples or a system message in).
    Raises ValueError naming them."""
    given = [f for f, v in (("--shots", shots), ("--dev", dev), ("--system-prompt", system_prompt)) if v]
    if given and TASKS[fmt].readout == CLASSIFIER_HEAD:
        raise ValueError(
            f"{'/'.join(given)}: format {fmt} is scored by a classifier head, whose input is the row's text "
            "through its template (no worked examples, no system message); drop "
            + ("it" if len(given) == 1 else "them")
        )


def prepare(
    input: Path,
    fmt: str,
    shots: int,
    dev: Path | None,
    n_sample: int | None,
    seed: int,
    labels: Callable[[], tuple[str, ...]] | None = None,
    system_prompt: str | None = None,
):
    """Read, convert and sample: (all items, chosen items, dev items or None, format). `labels()`: the
    model's labels (asked for a classifier-head format only); `system_prompt`: given or not (refused for
    those formats). Raises ConfigError for an unreadable or malformed benchmark file or inconsistent options."""
    try:
        items, fmt = to_items(read_records(input), fmt, labels)
        refuse_for_classifier(fmt, shots, dev, system_prompt)
        if shots and dev is None:
            raise ValueError("--shots needs --dev (the split the worked examples come from)")
        if shots and TASKS[fmt].kind == YES_NO:
            raise ValueError("--shots is for multiple-choice sets")
        dev_items = to_items(read_records(dev), fmt)[0] if shots and dev is not None else None  # checked above
    except OSError as e:  # a missing or unreadable file: its name and what happened (no `[Errno 2]`)
        raise ConfigError(f"eval: {os_error_text(e) if e.filename else e}") from None
    except (ValueError, ImportError) as e:  # JSONDecodeError and Arrow errors are ValueErrors/OSErrors
        raise ConfigError(f"eval: {e}") from None
    return items, sample(items, n_sample, seed), dev_items, fmt
