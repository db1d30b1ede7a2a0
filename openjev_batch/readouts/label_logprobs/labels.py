"""Single-token option labels (A…Z, then AA, AB, …), verified against the tokenizer in the answer context.

Options are shown to the model as labels; the answer is read from the logprob of each label's token at
the position after the answer lead. Digits are never used: many tokenizers split numbers into several
tokens. A candidate label L is kept only if, for the answer context C (the text every branch ends with):
``ids(C + " " + L) == ids(C) + [t]`` (one new token, the context unchanged) and ``decode([t]).strip() == L``,
with every kept id distinct.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from string import ascii_uppercase

from ...errors import LabelError

MAX_LABELS = 64


@dataclass(frozen=True)
class Label:
    text: str
    token_id: int


def candidates() -> list[str]:
    """A…Z then the two-letter labels AA…ZZ in order (702 candidates)."""
    return list(ascii_uppercase) + ["".join(p) for p in product(ascii_uppercase, repeat=2)]


def select_labels(tokenizer, context: str, n: int = MAX_LABELS, joiner: str = " ") -> tuple[Label, ...]:
    """The first `n` candidates that are one verified token after `context` + `joiner` (" ": the transcript
    layout's `Answer: A`; "": the systemone layout's `Answer:\nA`).

    Shapes: returns exactly `n` labels. Raises LabelError when the tokenizer yields fewer than `n`.
    """

    def enc(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    base = enc(context)
    out: list[Label] = []
    seen: set[int] = set()
    for text in candidates():
        ids = enc(context + joiner + text)
        if len(ids) != len(base) + 1 or ids[: len(base)] != base:
            continue
        t = ids[-1]
        if t in seen or tokenizer.decode([t]).strip() != text:
            continue
        seen.add(t)
        out.append(Label(text, t))
        if len(out) == n:
            return tuple(out)
    raise LabelError(
        f"the tokenizer gives only {len(out)} single-token labels after {context[-40:]!r} "
        f"(need {n}); this model cannot be used with up to {n} options"
    )
