"""Per-question prompt control on top of the Prompter: an answer lead per question (what the assistant turn
says before the label, `Answer:` by default) and worked examples per question.

Worked examples are shared by every row that asks the question, so they go where rows share tokens: into
the system message, before the row's text. Rows with the same questions then have the same leading tokens,
which the sglang radix cache prefills once for all of them (the planner sorts them together); the hf backend
reuses only identical whole prefixes. An answer lead changes the suffix and the context the labels are
verified in, so each distinct (system text, lead) gets its own Prompter (layout, cut and labels checked at
its construction, as for the default one); a row's branches from several leads share one prefix, which is
checked to be the same ids.
"""

from __future__ import annotations

from dataclasses import replace

from ...core import RowPrompt
from .branches import Failed
from .items import items, question_id
from .prompt import ANSWER_LEAD, Prompter
from .questions import QuestionSpec
from .rows import Row

SEP = "\n\n"
MAX_VARIANTS = 256  # distinct (system text, lead) Prompters kept; rows with per-row questions may make many


def needs_variants(rows: list[Row]) -> bool:
    return any(
        isinstance(q, QuestionSpec) and (q.answer_lead is not None or q.examples)
        for r in rows
        for q in r.questions
    )


def examples_text(prompter, questions) -> str:
    """The worked-examples block of a row's questions ('' when none has examples): per question its text
    and options as the suffix shows them, then each example's text and its answer's label."""
    blocks = []
    for q in questions:
        if not isinstance(q, QuestionSpec) or not q.examples or len(q.options) > len(prompter.labels):
            continue
        lead = q.answer_lead or ANSWER_LEAD
        shots = SEP.join(f"Text:\n{text.strip()}\n{lead} {prompter.labels[i].text}" for text, i in q.examples)
        blocks.append(f'Worked examples for question "{q.qid}":\n{prompter.question_text(q)}{SEP}{shots}')
    return SEP.join(blocks)


class Variants:
    """The label readout's prompter: a base Prompter, and the Prompters of its (system text, answer lead)
    variants, built on first use. It wraps the Prompter from outside, so prompt.py knows nothing of it."""

    def __init__(self, base: Prompter):
        self.base = base
        self.tok, self.text, self.labels = base.tok, base.text, base.labels  # what show.py reads
        self._cache: dict[tuple[str, str | None], object] = {}

    @property
    def image_id(self) -> int | None:
        """The image token's id (None: the model takes no images); `--dry-run` counts image tokens by it."""
        return self.base.images.image_id

    def get(self, system: str, lead: str | None):
        """The Prompter for this system text and lead, or the exception its construction raised (a lead
        whose context gives no single-token labels is then an error of the questions that use it)."""
        key = (system, lead)
        if key == (self.base.instructions, None):
            return self.base
        if key not in self._cache:
            if len(self._cache) >= MAX_VARIANTS:
                self._cache.clear()
            try:
                kw = {} if lead is None else {"answer_lead": lead}
                self._cache[key] = Prompter(
                    self.base.tok,
                    system,
                    max_branch_tokens=self.base.max_branch_tokens,
                    max_row_tokens=self.base.max_row_tokens,
                    **kw,
                )
            except Exception as e:  # noqa: BLE001 - LabelError / PromptError for this lead
                self._cache[key] = e
        return self._cache[key]

    def build(self, row: Row):
        """One row; see `build_many`."""
        return self.build_many([row])[0]

    def build_many(self, rows: list[Row]):
        """Prompter.build_many, each question with its own answer lead and worked examples. Rows are batched
        per (system text, lead), so tokenization stays one batched call per variant."""
        if not needs_variants(rows):
            return self.base.build_many(rows)
        todo: dict[tuple[str, str | None], list[tuple[int, Row]]] = {}
        systems: dict[tuple, str] = {}  # a question set's system text, computed once per distinct set
        for i, row in enumerate(rows):
            key = tuple(q.qid for q in row.questions if isinstance(q, QuestionSpec) and q.examples)
            if key not in systems:
                ex = examples_text(self.base, row.questions)
                systems[key] = self.base.instructions + (SEP + ex if ex else "")
            groups: dict[str | None, list] = {}
            for q in row.questions:
                groups.setdefault(q.answer_lead if isinstance(q, QuestionSpec) else None, []).append(q)
            for lead, qs in groups.items():
                todo.setdefault((systems[key], lead), []).append((i, replace(row, questions=tuple(qs))))
        built: list[list] = [[] for _ in rows]  # per row: (RowPrompt | None, fails) of each of its groups
        for (system, lead), members in todo.items():
            p = self.get(system, lead)
            if isinstance(p, Exception):
                for i, r in members:
                    err = [
                        Failed(q.qid, f"row {r.id}: questions.{q.qid}.answer_lead: {p}") for q in r.questions
                    ]
                    built[i].append((None, tuple(err)))
                continue
            for (i, _), res in zip(members, p.build_many([r for _, r in members]), strict=True):
                built[i].append(res)
        out = []
        for row, parts in zip(rows, built, strict=True):
            prefix, branches, failed, images = None, {}, [], ()
            for rp, fails in parts:
                failed += fails
                if rp is None:
                    continue
                images = rp.images
                if prefix is not None and rp.prefix != prefix:
                    qids = dict.fromkeys(question_id(b.qid) for b in rp.branches)
                    failed += [
                        Failed(q, f"row {row.id}: questions.{q}.answer_lead: changes the prefix tokens")
                        for q in qids
                    ]
                    continue
                prefix = rp.prefix
                branches.update({b.qid: b for b in rp.branches})
            ordered = tuple(
                branches[it.bid]
                for q in row.questions
                if isinstance(q, QuestionSpec)
                for it in items(q)
                if it.bid in branches
            )
            # a branch came with a RowPrompt, which set the prefix
            rp_out = RowPrompt(row.pos, row.id, prefix, ordered, images) if ordered and prefix is not None else None
            out.append((rp_out, tuple(failed)))
        return out
