"""Questions asked as several branches on the row's one prefix (issue 32.2, 32.3): each extra branch is one
more suffix, so its cost is the suffix's tokens (or one more item of a multi-item request), never the prefix.

- `type: multi` (K labels): one yes/no item per label ("Does this label apply?"); the output has each label's
  P(yes) in `probs` (aligned with `options`, the labels; they do not sum to 1) and `chosen`, the labels with
  P(yes) ≥ the question's threshold (default 0.5; a calibration file may set it). `answer` is null.
- order debiasing (`debias: K`, or the job's `--debias-order K`, choice and score): the options are also
  shown in K − 1 cyclic orders, the r-th shifted by round(r·n/K) places, so each option stands at K different
  letters. The probabilities are averaged by option (score levels keep their semantic order in the output);
  `order_spread` is the largest change of any option's probability across the orders.

A branch's id is the question id for the first item (so a plain question's branch is as before) and
`<qid>\\x1f<k>` for item k > 0.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from ...errors import OptionWarning
from .answer import Answer, confidence, label_mass, read_out
from .questions import QuestionError, QuestionSpec

ITEM_SEP = "\x1f"


@dataclass(frozen=True)
class Item:
    """One branch of a question: its id, the question as that branch displays it, and `shift`: displayed
    option j is option (j + shift) mod n (debias), or the label index (multi)."""

    bid: str
    shown: QuestionSpec
    shift: int


def branch_id(qid: str, k: int) -> str:
    return qid if k == 0 else f"{qid}{ITEM_SEP}{k}"


def with_debias(q: QuestionSpec | QuestionError, k: int) -> QuestionSpec | QuestionError:
    """`q` under the job's `--debias-order k`: choice and score questions without their own `debias` get
    k orders; a question with fewer than k options is a QuestionError (message without the row)."""
    if k <= 1 or not isinstance(q, QuestionSpec) or q.type not in ("choice", "score") or q.debias is not None:
        return q
    if k > len(q.options):
        why = (f"--debias-order {k} is larger than its {len(q.options)} options (at most one order per option; "
               f"a question's own `debias: {len(q.options)}` overrides the job's)")  # fmt: skip
        return QuestionError(q.qid, q.type, f"questions.{q.qid}: {why}")
    if k < len(q.options):
        _warn_fewer_orders(q.qid, len(q.options), k)
    return replace(q, debias=k)


@functools.cache  # once per question id and size: per-row questions come here once per row
def _warn_fewer_orders(qid: str, n: int, k: int) -> None:
    """K orders of n > K options leave each option at only K of the n letters, so a model's letter preference
    stays (MMLU at K = 2: answers piled on A and C, −6 points; evals/README.md): one warning line."""
    warnings.warn(
        f"--debias-order {k} is below the {n} options of question {qid!r}: each option is shown at only {k} of "
        f"the {n} letters, so a letter preference stays; use --debias-order {n} (the option count), or the "
        f"question's own `debias: {n}` where the questions' option counts differ, to cancel it",
        OptionWarning,
        stacklevel=3,
    )


def question_id(bid: str) -> str:
    """The question a branch id belongs to."""
    return bid.split(ITEM_SEP, 1)[0]


def items(q: QuestionSpec) -> tuple[Item, ...]:
    """The branches a question is asked as (one for a plain question)."""
    if q.type == "multi":
        return tuple(Item(branch_id(q.qid, k), _yes_no(q, k), k) for k in range(len(q.options)))
    k, n = q.debias or 1, len(q.options)
    if k <= 1:
        return (Item(q.qid, q, 0),)
    shifts = [round(r * n / k) % n for r in range(k)]
    return tuple(Item(branch_id(q.qid, r), _rotated(q, s), s) for r, s in enumerate(shifts))


def _rotated(q: QuestionSpec, s: int) -> QuestionSpec:
    return replace(
        q, options=q.options[s:] + q.options[:s], descriptions=q.descriptions[s:] + q.descriptions[:s]
    )


def _yes_no(q: QuestionSpec, k: int) -> QuestionSpec:
    name, desc = q.options[k], q.descriptions[k]
    label = f"{name}: {desc}" if desc else name
    text = f"{q.instructions.strip()}\nLabel: {label}\nDoes this label apply?"
    return QuestionSpec(q.qid, "noul", text, ("true", "false"), ("Yes", "No"), q.answer_lead)


@dataclass(frozen=True)
class Combined:
    answer: Answer
    chosen: list[str] | None = None
    order_spread: float | None = None


def combine(q: QuestionSpec, values: Sequence[Sequence[float]]) -> Combined:
    """A question's answer from its items' label logprobs (aligned with `items(q)`). Raises ValueError (the
    question's error) for a missing or non-finite logprob."""
    its = items(q)
    if len(its) == 1 and q.type != "multi":  # a one-label multi is still its yes/no item (hostile trial)
        return Combined(read_out(q, values[0]))
    per = [read_out(it.shown, v) for it, v in zip(its, values, strict=True)]
    if q.type == "multi":
        p_yes = tuple(a.probs[0] for a in per)
        th = 0.5 if q.threshold is None else q.threshold  # 0 is a threshold (every label), not "unset"
        chosen = [o for o, p in zip(q.options, p_yes, strict=True) if p >= th]
        a = Answer(q.qid, q.type, q.options, p_yes, None, None, None,  # type: ignore[arg-type]
                   confidence=sum(x.confidence for x in per) / len(per),
                   label_mass=sum(x.label_mass for x in per) / len(per))  # fmt: skip
        return Combined(a, chosen=chosen)
    n = len(q.options)
    by_order = []
    for it, a in zip(its, per, strict=True):  # back to the options' own order
        p = [0.0] * n
        for j, x in enumerate(a.probs):
            p[(j + it.shift) % n] = x
        by_order.append(p)
    mean = [sum(p[i] for p in by_order) / len(by_order) for i in range(n)]
    spread = max(max(p[i] for p in by_order) - min(p[i] for p in by_order) for i in range(n))
    best = max(range(n), key=mean.__getitem__)
    a = Answer(q.qid, q.type, q.options, tuple(mean), q.options[best],
               p_true=None, score=sum(i * x for i, x in enumerate(mean)) if q.type == "score" else None,
               confidence=confidence(mean), label_mass=sum(label_mass(v) for v in values) / len(values))  # fmt: skip
    return Combined(a, order_spread=spread)


def chosen_labels(table: pa.Table, key: pa.ChunkedArray) -> pa.Table:
    """multi rows (no single `answer`): one entry per label in `chosen`, its P(yes) as the confidence, so the
    answers table counts the rows that chose each label (it counted none: new-user trial, 2026-12-05). `row`
    is 1 on one entry of each answered row, and a row that chose no label has one entry with a null answer,
    so the table's share is of rows, not of chosen labels (issue 42.3)."""
    qs, labels, p_chosen, first = [], [], [], []
    cols = ("type", "options", "probs", "chosen", "error")
    rows = zip(key.to_pylist(), *(table.column(c).to_pylist() for c in cols), strict=True)
    for k, typ, opts, probs, chosen, error in rows:
        if typ != "multi" or error is not None or probs is None:
            continue
        p_yes = dict(zip(opts, probs, strict=True))
        for i, label in enumerate(chosen or [None]):
            qs.append(k)
            labels.append(label)
            p_chosen.append(p_yes.get(label))
            first.append(int(i == 0))
    n = len(qs)
    return pa.table([pa.array(qs, pa.string()), pa.array(labels, pa.string()), pa.array(p_chosen, pa.float64()),
                     pa.nulls(n, pa.bool_()), pa.array(first, pa.int64())],
                    names=["question", "answer", "confidence", "abstain", "row"])  # fmt: skip
