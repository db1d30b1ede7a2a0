"""A row's prompt from its ids: the shared prefix, one branch per question (its suffix ids and label ids),
under the per-branch and per-row token limits. What cannot be asked is a `Failed` question naming the row
and the limit, never an exception (row errors are values)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...core import BranchSpec, RowPrompt
from .labels import Label
from .questions import QuestionError
from .rows import Row


@dataclass(frozen=True)
class Failed:
    """A question that could not be prompted (over a token limit, or invalid upstream)."""

    qid: str
    error: str


def row_prompt(
    row: Row,
    prefix: tuple[int, ...],
    suffixes: dict[str, tuple[int, ...]],
    labels: Sequence[Label],
    max_branch_tokens: int,
    max_row_tokens: int,
) -> tuple[RowPrompt | None, tuple[Failed, ...]]:
    """(the RowPrompt of the row's questions that fit, or None when none does, the failed questions).
    `suffixes`: qid → suffix ids of the questions the labels can answer (the others fail here)."""
    branches: list[BranchSpec] = []
    failed: list[Failed] = []
    total = len(prefix)
    for q in row.questions:
        if isinstance(q, QuestionError):
            failed.append(Failed(q.qid, q.error))
            continue
        if q.qid not in suffixes:
            why = f"{len(q.options)} options, the tokenizer gives {len(labels)} labels"
            failed.append(Failed(q.qid, f"row {row.id}: questions.{q.qid}.criteria: {why}"))
            continue
        suffix = suffixes[q.qid]
        n = len(prefix) + len(suffix)
        if n > max_branch_tokens:
            why = f"branch has {n} tokens, limit {max_branch_tokens}"
            failed.append(Failed(q.qid, f"row {row.id}: questions.{q.qid}: {why}"))
            continue
        total += len(suffix)
        ids = tuple(lb.token_id for lb in labels[: len(q.options)])
        branches.append(BranchSpec(q.qid, suffix, ids))
    if total > max_row_tokens:
        err = f"row {row.id}: state: row has {total} input tokens, limit {max_row_tokens}"
        return None, tuple(failed) + tuple(Failed(b.qid, err) for b in branches)
    if not branches:
        return None, tuple(failed)
    return RowPrompt(row.pos, row.id, prefix, tuple(branches)), tuple(failed)
