"""A row's prompt from its ids: the shared prefix, one branch per question (its suffix ids and label ids),
under the per-branch and per-row token limits. What cannot be asked is a `Failed` question naming the row
and the limit, never an exception (row errors are values)."""

from __future__ import annotations

from collections.abc import Sequence

from ...core import BranchSpec, RowPrompt
from ..base import Failed
from .items import items, question_id
from .labels import Label
from .questions import QuestionError
from .rows import MAX_BRANCH_TOKENS, Row


def row_prompt(
    row: Row,
    prefix: tuple[int, ...],
    suffixes: dict[str, tuple[int, ...]],
    labels: Sequence[Label],
    max_branch_tokens: int,
    max_row_tokens: int,
) -> tuple[RowPrompt | None, tuple[Failed, ...]]:
    """(the RowPrompt of the row's questions that fit, or None when none does, the failed questions).
    `suffixes`: branch id (items.py) → suffix ids of the questions the labels can answer (the others fail
    here)."""
    branches: list[BranchSpec] = []
    failed: list[Failed] = []
    total = len(prefix)
    for q in row.questions:
        if isinstance(q, QuestionError):
            failed.append(Failed(q.qid, q.error))
            continue
        its = items(q)  # several branches for multi and order-debiased questions, all or none asked
        if its[0].bid not in suffixes:
            why = f"{len(q.options)} options, the tokenizer gives {len(labels)} labels"
            failed.append(Failed(q.qid, f"row {row.id}: questions.{q.qid}.criteria: {why}"))
            continue
        n = len(prefix) + max(len(suffixes[it.bid]) for it in its)
        if n > max_branch_tokens:
            why = f"branch has {n} tokens, limit {max_branch_tokens}" + (
                " (the model's context length)" if max_branch_tokens < MAX_BRANCH_TOKENS else ""
            )
            failed.append(Failed(q.qid, f"row {row.id}: questions.{q.qid}: {why}"))
            continue
        for it in its:
            total += len(suffixes[it.bid])
            ids = tuple(lb.token_id for lb in labels[: len(it.shown.options)])
            branches.append(BranchSpec(it.bid, suffixes[it.bid], ids))
    if total > max_row_tokens:
        err = f"row {row.id}: state: row has {total} input tokens, limit {max_row_tokens}"
        asked = dict.fromkeys(question_id(b.qid) for b in branches)
        return None, tuple(failed) + tuple(Failed(qid, err) for qid in asked)
    if not branches:
        return None, tuple(failed)
    return RowPrompt(row.pos, row.id, prefix, tuple(branches)), tuple(failed)
