"""Prompt stage: render the chat template once per row, split it into a shared prefix and one suffix
per question, and tokenize so the prefix ids are an exact prefix of every branch's ids.

Layout (one render per row, thinking disabled)::

    [system] INSTRUCTIONS
    [user]   Conversation:\n<transcript>\n\n  ← prefix ends here (shared by all of the row's questions)
             Question: …\nOptions:\nA. …\nB. …\nReply with one letter.
    <end of turn><assistant header>Answer:    ← suffix; the label token comes next

The template is rendered with a sentinel where the suffix goes; the text before it is the prefix,
the text after it (end of turn + assistant header, empty think block where the template has one) is the
tail shared by every suffix. The prefix ends in a blank line so the boundary is a natural token boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

from .labels import Label, select_labels
from .plan import BranchSpec, RowPrompt
from .schema import MAX_BRANCH_TOKENS, MAX_ROW_TOKENS, QuestionError, QuestionSpec, Row

INSTRUCTIONS = (
    "You are a careful annotator. Read the text below, then answer the question about it by choosing "
    "exactly one of the listed options. Reply with the option's letter only."
)
ANSWER_LEAD = "Answer:"
_SENTINEL = "<<openjev-suffix-7f3a>>"


@dataclass(frozen=True)
class Failed:
    """A question that could not be prompted (over a token limit, or invalid upstream)."""

    qid: str
    error: str


def quiet_length_warning(tokenizer):
    """Returns the tokenizer with transformers' "Token indices sequence length is longer…" warning marked as
    already given. The product checks lengths itself (branch/row limits, the engine's context) and reports
    them as row errors; that warning would only leak into the job's output."""
    if isinstance(getattr(tokenizer, "deprecation_warnings", None), dict):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    return tokenizer


class Prompter:
    """Builds `RowPrompt`s for one tokenizer. Labels are verified once, at construction.

    Raises LabelError (construction) when the tokenizer cannot give 64 labels in the answer context.
    """

    def __init__(
        self,
        tokenizer,
        instructions: str = INSTRUCTIONS,
        max_branch_tokens: int = MAX_BRANCH_TOKENS,
        max_row_tokens: int = MAX_ROW_TOKENS,
    ):
        self.tok = quiet_length_warning(tokenizer)
        self.instructions = instructions
        self.max_branch_tokens = max_branch_tokens
        self.max_row_tokens = max_row_tokens
        _, tail = self.split(self.render("x"))
        self.labels: tuple[Label, ...] = select_labels(tokenizer, tail + ANSWER_LEAD)
        self._suffix_cache: dict[str, tuple[int, ...]] = {}  # suffix text → ids

    # -- text -------------------------------------------------------------------------------------
    def render(self, body: str) -> str:
        """Render system + user(body + sentinel) + assistant header through the model's template."""
        msgs = [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": body + _SENTINEL},
        ]
        kw = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        try:
            return self.tok.apply_chat_template(msgs, **kw)
        except Exception:  # templates without a system role: fold the instructions into the user turn
            msgs = [{"role": "user", "content": self.instructions + "\n\n" + body + _SENTINEL}]
            return self.tok.apply_chat_template(msgs, **kw)

    @staticmethod
    def split(text: str) -> tuple[str, str]:
        head, sep, tail = text.partition(_SENTINEL)
        if not sep or _SENTINEL in tail:
            raise ValueError("chat template did not keep the user message verbatim")
        return head, tail

    @staticmethod
    def body(row: Row) -> str:
        if row.plain:
            return f"Text:\n{row.messages[0].content}\n\n"
        turns = "\n\n".join(f"{m.role}: {m.content}" for m in row.messages)
        return f"Conversation:\n{turns}\n\n"

    def question_text(self, q: QuestionSpec) -> str:
        lines = [f"Question: {q.instructions.strip()}", "Options:"]
        for label, name, desc in zip(self.labels, q.options, q.descriptions, strict=False):
            shown = desc if q.type in ("noul", "score") else (f"{name}: {desc}" if desc else name)
            lines.append(f"{label.text}. {shown}")
        lines.append("Reply with the letter of one option.")
        return "\n".join(lines)

    # -- ids --------------------------------------------------------------------------------------
    def _encode(self, texts: list[str]) -> list[tuple[int, ...]]:
        # One batched call: the Rust tokenizer spreads a batch over all cores (~5 ms per 1,000-token
        # prefix on one core would otherwise dominate the host side).
        # Slices of 1,000: a batch's intermediate encodings (offsets, token strings) cost ~50 KB a row.
        out: list[tuple[int, ...]] = []
        for i in range(0, len(texts), 1000):
            out.extend(tuple(x) for x in self.tok(texts[i : i + 1000], add_special_tokens=False)["input_ids"])
        return out

    def build(self, row: Row) -> tuple[RowPrompt | None, tuple[Failed, ...]]:
        """One row; see `build_many`."""
        return self.build_many([row])[0]

    def build_many(self, rows: list[Row]) -> list[tuple[RowPrompt | None, tuple[Failed, ...]]]:
        """Rows → (RowPrompt of each row's valid questions or None, its failed questions), aligned with
        `rows`. Never raises for row data: a row whose template rendering fails gets every question failed."""
        rendered: list[tuple[str, str] | Exception] = []
        for row in rows:
            try:
                rendered.append(self.split(self.render(self.body(row))))
            except Exception as e:  # noqa: BLE001 - a bad row never sinks the job
                rendered.append(e)
        # Rows often share a whole prefix (a few-shot block, one conversation asked several question sets):
        # tokenize each distinct prefix text once and share its ids.
        texts = [r[0] for r in rendered if not isinstance(r, Exception)]
        distinct_prefixes = list(dict.fromkeys(texts))
        by_text = dict(zip(distinct_prefixes, self._encode(distinct_prefixes), strict=True))
        prefixes = iter([by_text[t] for t in texts])
        suffix_text: list[dict[str, str]] = [{} for _ in rows]  # per row: qid → suffix text
        for texts, row, r in zip(suffix_text, rows, rendered, strict=True):
            if isinstance(r, Exception):
                continue
            for q in row.questions:
                if isinstance(q, QuestionSpec) and len(q.options) <= len(self.labels):
                    texts[q.qid] = self.question_text(q) + r[1] + ANSWER_LEAD
        # Questions repeat across rows (a shared --questions file): tokenize each distinct suffix once.
        distinct = {t for texts in suffix_text for t in texts.values()}
        todo = sorted(distinct - self._suffix_cache.keys())
        if len(self._suffix_cache) + len(todo) > 100_000:
            self._suffix_cache.clear()
            todo = sorted(distinct)
        self._suffix_cache.update(zip(todo, self._encode(todo), strict=True))
        out = []
        for row, r, texts in zip(rows, rendered, suffix_text, strict=True):
            if isinstance(r, Exception):
                out.append(
                    (
                        None,
                        tuple(
                            Failed(q.qid, f"row {row.id}: state: cannot render the chat template: {r}")
                            for q in row.questions
                        ),
                    )
                )
                continue
            out.append(
                self._assemble(row, next(prefixes), {q: self._suffix_cache[t] for q, t in texts.items()})
            )
        return out

    def _assemble(
        self, row: Row, prefix: tuple[int, ...], suffixes: dict[str, tuple[int, ...]]
    ) -> tuple[RowPrompt | None, tuple[Failed, ...]]:
        branches: list[BranchSpec] = []
        failed: list[Failed] = []
        total = len(prefix)
        for q in row.questions:
            if isinstance(q, QuestionError):
                failed.append(Failed(q.qid, q.error))
                continue
            if q.qid not in suffixes:
                failed.append(
                    Failed(
                        q.qid,
                        f"row {row.id}: questions.{q.qid}.criteria: {len(q.options)} options, "
                        f"the tokenizer gives {len(self.labels)} labels",
                    )
                )
                continue
            suffix = suffixes[q.qid]
            n = len(prefix) + len(suffix)
            if n > self.max_branch_tokens:
                failed.append(
                    Failed(
                        q.qid,
                        f"row {row.id}: questions.{q.qid}: branch has {n} tokens, "
                        f"limit {self.max_branch_tokens}",
                    )
                )
                continue
            total += len(suffix)
            ids = tuple(lb.token_id for lb in self.labels[: len(q.options)])
            branches.append(BranchSpec(q.qid, suffix, ids))
        if total > self.max_row_tokens:
            err = f"row {row.id}: state: row has {total} input tokens, limit {self.max_row_tokens}"
            return None, tuple(failed) + tuple(Failed(b.qid, err) for b in branches)
        if not branches:
            return None, tuple(failed)
        return RowPrompt(row.pos, row.id, prefix, tuple(branches)), tuple(failed)
