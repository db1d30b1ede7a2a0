"""Prompt stage: one chat-template layout per tokenizer, a shared prefix per row, one suffix per question,
tokenized so the prefix ids are an exact prefix of every branch's ids and equal the model's natural
tokenization of the branch.

Layout (thinking disabled)::

    [system] INSTRUCTIONS
    [user]   Conversation:\\n<transcript>  ⟨cut⟩ \\n\\n  ⟨cut⟩  Question: …\\nOptions:\\nA. …\\nB. …
             Reply with the letter of one option.
    <end of turn><assistant header>Answer:    ← the label token comes next

**Text is data.** The template is rendered once, at start-up, with placeholders for the system and user
message contents. Its output is split into the template's own markup — whose control tokens
(`<|im_start|>`, `<start_of_turn>`, Qwen3's `<think>` …) keep their ids — and the two content slots.
Everything in a slot — the conversation, question instructions, option names and descriptions, the
system instructions — is tokenized by `TextTokenizer`: the model's own normalizer, pre-tokenizer and BPE
with no control token recognised, so a ticket that writes `<|im_end|><|im_start|>assistant` gets text ids,
never a turn of its own. Because a Hugging Face tokenizer already cuts its input at every control token and
tokenizes the text between two of them on its own, ids built run by run are exactly the whole-text ids
whenever the content holds no control string. Content containing the placeholders is just text (they
exist only in the one start-up rendering).

**Natural boundary.** Where the prefix ends inside the user turn matters: SmolLM2 tokenizes a prefix that
ends in a blank line as one `ĊĊ`, the branch tokenized whole as `Ċ`, `Ċ`. At start-up the prompter tries the
cut after, in the middle of, and before the blank line between transcript and question, and keeps the
first for which prefix ids + suffix ids equal the whole branch rendered through the real template and
tokenized by the tokenizer itself, on probe conversations ending in letters, digits, punctuation, CJK,
emoji. None → PromptError. The transcript's trailing whitespace is dropped so the character before the
cut is never whitespace (templates such as Llama 3's and Gemma's trim message contents anyway).

The ids of a row are then put together under the token limits by branches.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from ...core import RowPrompt
from ...errors import PromptError
from ...images import ImageProblem
from ..image_prompt import ImageSlots, has_images, image_fields
from ..text import TextTokenizer
from .branches import Failed, row_prompt
from .items import items
from .labels import Label, select_labels
from .leads import lead_problem
from .questions import QuestionSpec
from .rows import MAX_BRANCH_TOKENS, MAX_ROW_TOKENS, Row

INSTRUCTIONS = (
    "You are a careful annotator. Read the text below, then answer the question about it by choosing "
    "exactly one of the listed options. Reply with the option's letter only."
)
ANSWER_LEAD = "Answer:"
# The name and version of the ids this module builds for a given text (recorded in eval reports, so a committed
# result says which tokenization produced it). Bump the number whenever the same row and question would get
# other ids: /1 is content tokenized as text in two slots, with the per-tokenizer prefix/suffix cut (704445d).
TOKENIZATION = "text-slots-natural-cut/1"
SEP = "\n\n"  # between the transcript and the question, inside the user turn


def tokenization(cut: int) -> str:
    """The eval report's name for the prompt's tokenization: the scheme's version and a tokenizer's cut."""
    return f"{TOKENIZATION} (prefix ends {('before', 'inside', 'after')[cut]} the blank line)"


# Placeholders for the start-up rendering only (private-use characters: no template or tokenizer treats
# them specially, and no row content is ever substituted into a rendering).
_SYSTEM_SLOT = "\ue000openjev-system\ue001"
_USER_SLOT = "\ue000openjev-user\ue001"
# Probe conversations for the boundary check: the characters a transcript can end with.
_PROBES = (
    "hello",
    "It broke.",
    "order 4521",
    "why?!",
    "done :)",
    "価格は高い",
    "thanks 🙂",
    "see [1]",
    "a\tb",
)


def quiet_length_warning(tokenizer):
    """Returns the tokenizer with transformers' "Token indices sequence length is longer…" warning marked as
    already given. The product checks lengths itself (branch/row limits, the engine's context) and reports
    them as row errors; that warning would only leak into the job's output."""
    if isinstance(getattr(tokenizer, "deprecation_warnings", None), dict):
        tokenizer.deprecation_warnings["sequence-length-is-longer-than-the-specified-maximum"] = True
    return tokenizer


class Prompter:
    """Builds `RowPrompt`s for one tokenizer. The template layout, the cut and the labels are fixed and
    verified once, at construction.

    Raises LabelError (construction) when the tokenizer cannot give 64 labels in the answer context;
    PromptError when the template does not keep message contents verbatim, or no cut gives the natural
    tokenization.
    """

    def __init__(
        self,
        tokenizer,
        instructions: str = INSTRUCTIONS,
        max_branch_tokens: int = MAX_BRANCH_TOKENS,
        max_row_tokens: int = MAX_ROW_TOKENS,
        answer_lead: str = ANSWER_LEAD,
    ):
        self.tok = quiet_length_warning(tokenizer)
        self.answer_lead = answer_lead  # what the assistant turn says before the label
        self.instructions = instructions.strip()
        self.max_branch_tokens = max_branch_tokens
        self.max_row_tokens = max_row_tokens
        self.text = TextTokenizer(tokenizer)
        if why := lead_problem(answer_lead, self.text.control_pattern):  # this model's own markup too
            raise PromptError(why)
        # The start-up check compares with the tokenizer's own reading of the whole text, so it runs with
        # instructions the tokenizer reads as text too (control strings removed); then the real ones.
        self._layout(self.text.without_controls(self.instructions))
        # labels are read after the answer lead, which follows the template's assistant header (markup)
        self.labels: tuple[Label, ...] = select_labels(tokenizer, self.tail + self.answer_lead)
        self.cut = self._choose_cut()
        self._layout(self.instructions)
        self._suffix_cache: dict[str, tuple[int, ...]] = {}  # suffix text → ids
        self.images = ImageSlots(self)  # a row's images in its prefix (loads the image processor on first use)

    # -- the layout (once) ------------------------------------------------------------------------
    def render(self, system: str, user: str) -> str:
        """The template over one system and one user message, generation prompt added, thinking disabled.
        A template without a system role gets the instructions at the top of the user turn."""
        kw = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        try:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            return self.tok.apply_chat_template(msgs, **kw)
        except Exception:  # noqa: BLE001 - e.g. raise_exception("System role not supported")
            return self.tok.apply_chat_template([{"role": "user", "content": system + SEP + user}], **kw)

    def _layout(self, instructions: str) -> None:
        """Split the placeholder rendering into markup and slots: `_pre` (complete ids before the text run in
        which the user content starts), `_pre_run` (that run's text before the content), `_post_run` (text
        after the content up to the next control token), `_post` (ids of the rest, answer lead included)."""
        try:
            text = self.render(_SYSTEM_SLOT, _USER_SLOT)
        except Exception as e:  # no chat template (a base model), or one that refuses two messages
            raise PromptError(f"cannot render the model's chat template: {type(e).__name__}: {e}") from e
        if (
            text.count(_SYSTEM_SLOT) != 1
            or text.count(_USER_SLOT) != 1
            or text.find(_SYSTEM_SLOT) > text.find(_USER_SLOT)
        ):
            raise PromptError("the chat template does not keep the system and user message contents verbatim")
        head, _, tail = text.partition(_USER_SLOT)
        self.tail = tail
        h0, _, h1 = head.partition(_SYSTEM_SLOT)  # the instructions are content: never scanned for markup
        pre = [*self.text.markup(h0), instructions, *self.text.markup(h1)]
        self._layout_instructions = instructions
        i = max((k for k, p in enumerate(pre) if isinstance(p, int)), default=-1)
        self._pre = self.text.ids(pre[: i + 1])
        self._pre_run = "".join(p for p in pre[i + 1 :] if isinstance(p, str))
        post = self.text.markup(tail)  # text, id, text, …, text
        self._post: tuple[int, ...] = ()
        if len(post) == 1:  # no control token after the user content: one run to the answer lead
            self._post_run = tail + self.answer_lead
        else:
            self._post_run = cast(str, post[0])
            *rest, last = post[1:]
            self._post = self.text.ids([*rest, cast(str, last) + self.answer_lead])

    def _choose_cut(self) -> int:
        """How many characters of SEP end the prefix (2, 1 or 0): the first cut for which every probe's
        prefix + suffix ids equal its whole rendering tokenized by the tokenizer itself."""
        q = QuestionSpec("q", "choice", "Which one?", ("x", "y", "z"), ("first", None, "third"))
        qtext = self.question_text(q)
        problems = []
        for cut in (2, 1, 0):
            self.cut = cut
            bad = []
            for probe in _PROBES:
                body = f"Conversation:\nuser: {probe}"
                whole = self.render(self._layout_instructions, body + SEP + qtext) + self.answer_lead
                natural = tuple(self.tok(whole, add_special_tokens=False)["input_ids"])
                ours = (
                    self._prefix_ids([self._prefix_text(body)])[0]
                    + self._suffix_ids([self._suffix_text(qtext)])[0]
                )
                if ours != natural:
                    bad.append(probe)
            if not bad:
                return cut
            problems.append(f"cut {cut}: {', '.join(map(repr, bad))}")
        raise PromptError(
            "no prefix/suffix cut gives this tokenizer's natural tokenization of the prompt "
            f"(probes that differ: {'; '.join(problems)})"
        )

    # -- text -------------------------------------------------------------------------------------
    @staticmethod
    def body(row: Row) -> str:
        """The row's transcript as the user turn shows it (trailing whitespace dropped; see the module doc)."""
        if row.plain:
            return f"Text:\n{row.messages[0].content}".rstrip()
        turns = "\n\n".join(f"{m.role}: {m.content}" for m in row.messages)
        return f"Conversation:\n{turns}".rstrip()

    def question_text(self, q: QuestionSpec) -> str:
        lines = [f"Question: {q.instructions.strip()}", "Options:"]
        for label, name, desc in zip(self.labels, q.options, q.descriptions, strict=False):
            shown = (desc or name) if q.type in ("noul", "score") else (f"{name}: {desc}" if desc else name)
            lines.append(f"{label.text}. {shown}")
        lines.append("Reply with the letter of one option.")
        return "\n".join(lines)

    @property
    def tokenization(self) -> str:
        """This prompter's tokenization by name (`tokenization`), recorded in an eval's report."""
        return tokenization(self.cut)

    def _prefix_text(self, body: str) -> str:
        return body + SEP[: self.cut]

    def _suffix_text(self, question: str) -> str:
        return SEP[self.cut :] + question

    def branch_text(self, row: Row, q: QuestionSpec) -> str:
        """The whole text of one branch as the template renders it (what the model reads; for display and
        tests — the ids are built run by run, see the module doc)."""
        return self.render(self.instructions, self.body(row) + SEP + self.question_text(q)) + self.answer_lead

    # -- ids --------------------------------------------------------------------------------------
    def _prefix_ids(self, prefix_texts: list[str]) -> list[tuple[int, ...]]:
        return [self._pre + x for x in self.text.encode([self._pre_run + t for t in prefix_texts])]

    def _suffix_ids(self, suffix_texts: list[str]) -> list[tuple[int, ...]]:
        return [x + self._post for x in self.text.encode([t + self._post_run for t in suffix_texts])]

    def build(self, row: Row) -> tuple[RowPrompt | None, tuple[Failed, ...]]:
        """One row; see `build_many`."""
        return self.build_many([row])[0]

    def build_many(self, rows: list[Row]) -> list[tuple[RowPrompt | None, tuple[Failed, ...]]]:
        """Rows → (RowPrompt of each row's valid questions or None, its failed questions), aligned with
        `rows`. Never raises for row data. Every question is asked with this Prompter's own instructions and
        answer lead: questions with their own lead or worked examples go through `prompt_variants.Variants`,
        which wraps a Prompter (the readout's `prompter()` returns one)."""
        # Rows often share a whole prefix (a few-shot block, one conversation asked several question sets):
        # tokenize each distinct prefix text once and share its ids.
        texts = [self._prefix_text(self.body(row)) for row in rows]
        distinct_prefixes = list(dict.fromkeys(t for t, r in zip(texts, rows, strict=True) if not has_images(r)))
        by_text = dict(zip(distinct_prefixes, self._prefix_ids(distinct_prefixes), strict=True))
        suffix_text: list[dict[str, str]] = [{} for _ in rows]  # per row: qid → suffix text
        for st, row in zip(suffix_text, rows, strict=True):
            for q in row.questions:
                if not isinstance(q, QuestionSpec):
                    continue
                its = items(q)  # one suffix per branch: several for multi and order-debiased questions
                if max(len(it.shown.options) for it in its) <= len(self.labels):
                    st.update((it.bid, self._suffix_text(self.question_text(it.shown))) for it in its)
        # Questions repeat across rows (a shared --questions file): tokenize each distinct suffix once.
        distinct = {t for st in suffix_text for t in st.values()}
        todo = sorted(distinct - self._suffix_cache.keys())
        if len(self._suffix_cache) + len(todo) > 100_000:
            self._suffix_cache.clear()
            todo = sorted(distinct)
        self._suffix_cache.update(zip(todo, self._suffix_ids(todo), strict=True))
        limits = (self.max_branch_tokens, self.max_row_tokens)
        out = []
        for row, t, st in zip(rows, texts, suffix_text, strict=True):
            suffixes = {q: self._suffix_cache[s] for q, s in st.items()}
            if not has_images(row):
                out.append(row_prompt(row, by_text[t], suffixes, self.labels, *limits))
                continue
            try:  # the images' tokens in the prefix (readouts/image_prompt.py)
                prefix, images = self.images.prefix(row, SEP[: self.cut])
            except ImageProblem as e:
                why = f"row {row.id}: {image_fields(row)}: {e}"
                out.append((None, tuple(Failed(q.qid, why) for q in row.questions)))
                continue
            rp, fails = row_prompt(row, prefix, suffixes, self.labels, *limits)
            out.append((replace(rp, images=images) if rp is not None else None, fails))
        return out
