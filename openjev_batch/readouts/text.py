"""Content tokenized as text, markup as its control ids, for both readouts: nothing in a row's text may become
a control token (`<|im_end|>` written in a conversation stays text)."""

from __future__ import annotations

import re

from ..errors import PromptError


class TextTokenizer:
    """The model's tokenizer without its control tokens, for content; and the control tokens, for markup.

    A control token is every added token whose text is not only whitespace: special ones (`<|im_end|>`,
    `<|eot_id|>`, `<start_of_turn>`) and added non-special ones that `split_special_tokens` would not split
    (Qwen3's `<think>`, `</think>`, `<tool_call>`; Gemma's `<unusedN>`). Whitespace-only added tokens (Gemma's
    newline and indentation runs) are how the model reads ordinary text and stay.
    Raises PromptError for a tokenizer without a Rust `tokenizer.json` backend.
    """

    def __init__(self, tokenizer):
        from tokenizers import Tokenizer

        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise PromptError(
                f"{type(tokenizer).__name__} is not a fast tokenizer: the prompt stage needs the model's "
                "tokenizer.json to keep control tokens out of content"
            )
        added = backend.get_added_tokens_decoder()  # id → AddedToken
        self.control: dict[str, int] = {a.content: i for i, a in added.items() if a.content.strip()}
        self.control_ids = frozenset(self.control.values())
        # The same model, normalizer and pre-tokenizer objects (shared, not copied: a 33 MB Gemma
        # tokenizer.json would take seconds to serialise and parse), without the control tokens.
        text = Tokenizer(backend.model)
        text.normalizer, text.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
        # the model's own wrapping (BOS / [CLS] … [SEP]: inserted by id), for `encode(…, specials=True)`
        text.post_processor = backend.post_processor
        keep = {i: a for i, a in added.items() if not a.content.strip()}
        text.add_tokens(list(keep.values()))
        if any(text.token_to_id(a.content) != i for i, a in keep.items()):
            raise PromptError(
                "the tokenizer's whitespace added tokens do not keep their ids without control tokens"
            )
        self._text = text
        # longest first: the alternation then matches like the tokenizer's own leftmost-longest scan
        alts = sorted(self.control, key=len, reverse=True)
        self._control_re = re.compile("|".join(map(re.escape, alts))) if alts else None

    def encode(self, texts: list[str], specials: bool = False) -> list[tuple[int, ...]]:
        """Texts → ids, no control token recognised in them; `specials`: wrapped as the model's tokenizer
        wraps an input (its post-processor's BOS, [CLS] … [SEP]), for a whole classifier input. Batched: the
        Rust tokenizer spreads a batch over all cores; slices of 1,000 bound the intermediate encodings."""
        out: list[tuple[int, ...]] = []
        for i in range(0, len(texts), 1000):
            enc = self._text.encode_batch(texts[i : i + 1000], add_special_tokens=specials)
            out.extend(tuple(e.ids) for e in enc)
        return out

    @property
    def control_pattern(self) -> re.Pattern | None:
        """The control tokens as one pattern (None: the tokenizer has none)."""
        return self._control_re

    def without_controls(self, text: str) -> str:
        return self._control_re.sub("", text) if self._control_re else text

    def ids(self, pieces: list[str | int]) -> tuple[int, ...]:
        """Pieces (`markup`'s, or a template's rendering split at its control tokens) → ids: control ids as
        they are, each run of text between two of them tokenized as text (both prompt layouts build so)."""
        out: list[int] = []
        run = ""
        for p in [*pieces, None]:
            if isinstance(p, str):
                run += p
                continue
            if run:
                out.extend(self.encode([run])[0])
            run = ""
            if p is not None:
                out.append(p)
        return tuple(out)

    def markup(self, text: str) -> list[str | int]:
        """Template markup → text pieces and control ids, in order (how the tokenizer cuts it)."""
        if self._control_re is None:
            return [text]
        out: list[str | int] = []
        pos = 0
        for m in self._control_re.finditer(text):
            out.extend([text[pos : m.start()], self.control[m.group()]])
            pos = m.end()
        out.append(text[pos:])
        return out
