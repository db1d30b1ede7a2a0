"""The parse-only runner (`validate`): no tokenizer, no model. Each row the loop gives it is checked by its
readout (`readout.problems`: a row's invalid questions); a row refused whole is one error that covers every
question it has (`readout.n_records`), as in `run`'s output, where each of them is a record with that error. Its records only
stand for the job's output (the null sink counts them), so the loop's count check covers it too."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core import RowError
from ...readouts.base import Readout
from ..summary import Summary
from . import stand_ins

if TYPE_CHECKING:
    from ...config import RunConfig


@dataclass
class RowChecks:
    """What `validate` reports: the records (questions) of every row, a row refused whole too (the same count
    as `run`'s "questions": its output has one record per question of each row), and every error, in input
    order: a refused row's once, then each problem of a row; `covers[i]`, the questions `errors[i]` makes
    errors (a refused row's all, an invalid question's one), so the errors' questions add up to `run`'s
    "errors" (issue: validate said "4 questions" where run said "questions 6" of the same file)."""

    questions: int = 0
    errors: list[str] = field(default_factory=list)
    covers: list[int] = field(default_factory=list)

    @property
    def questions_with_errors(self) -> int:
        return sum(self.covers)


class ParseOnlyRunner:
    name = "parse-only"
    summary_type = Summary
    labels = None  # validate needs no classifier's labels to check its rows

    @contextlib.contextmanager
    def open(self, cfg: RunConfig, readout: Readout):
        self.readout, self.checks = readout, RowChecks()
        yield self

    def describe(self) -> dict[str, Any]:
        return {"counted": self.checks}

    def score(self, todo: Iterator[tuple[int, list]], tracker=None, progress=None, on_progress=None):
        """Check each row of each chunk of `todo`; yields (index, the chunk's stand-in records, {})."""
        r, c = self.readout, self.checks
        for i, chunk in todo:
            problems: dict[int, list[str]] = {}  # by row position, for the stand-ins
            for row in chunk:
                n = r.n_records(row)
                c.questions += n
                if isinstance(row, RowError):
                    c.errors.append(row.error)
                    c.covers.append(n)
                else:
                    problems[row.pos] = r.problems(row)
                    c.errors.extend(problems[row.pos])
                    c.covers.extend([1] * len(problems[row.pos]))
            yield i, stand_ins(r, chunk, problems), {}
