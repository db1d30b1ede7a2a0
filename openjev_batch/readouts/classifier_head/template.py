"""The premise/hypothesis prompt template of the classifier-head readout (`classify --template`), and where its
shared prefix ends."""

from __future__ import annotations

import string

from ...errors import ConfigError
from ...values import option_text_problem

DEFAULT_TEMPLATE = "Premise: {premise}\nHypothesis: {hypothesis}"
TEMPLATE_FIELDS = ("premise", "hypothesis")


class Template:
    """A prompt template over ``{premise}`` and ``{hypothesis}`` (``{{``/``}}`` for literal braces).

    `render(premise, hypothesis)` → (full prompt, shared prefix text). The prefix is everything before
    the ``{hypothesis}`` value with trailing whitespace moved to the variable part. Raises ConfigError for
    an unknown field, a format spec, or a template without exactly one ``{hypothesis}``."""

    def __init__(self, text: str):
        if (problem := option_text_problem(text)) is not None:  # the tokenizer raises on a surrogate
            raise ConfigError(f"--template: {problem}")
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as e:
            raise ConfigError(f"--template: {e}") from None
        self.text = text
        self.pieces: list[tuple[str, str | None]] = []
        for literal, fld, spec, conv in parsed:
            if fld is not None and (fld not in TEMPLATE_FIELDS or spec or conv):
                raise ConfigError(
                    f"--template: unknown field {{{fld}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}; "
                    "use {premise} and {hypothesis} ({{ and }} for literal braces)"
                )
            self.pieces.append((literal, fld))
        n_h = sum(f == "hypothesis" for _, f in self.pieces)
        if n_h != 1:
            raise ConfigError(f"--template: needs {{hypothesis}} exactly once, found it {n_h} times")
        self.fields = tuple(sorted({f for _, f in self.pieces if f}))

    def render(self, premise: str, hypothesis: str) -> tuple[str, str]:
        out: list[str] = []
        prefix = None
        for literal, fld in self.pieces:
            out.append(literal)
            if fld == "hypothesis":
                prefix = "".join(out)
                out.append(hypothesis)
            elif fld == "premise":
                out.append(premise)
        assert prefix is not None
        return "".join(out), prefix.rstrip()

    def parts(self, premise: tuple, hypothesis: str) -> tuple[list, list]:
        """`render` with a premise of several pieces (its text, then its images: any non-string objects) →
        (the prompt's pieces, its prefix's pieces): strings and the premise's other pieces in order, adjacent
        strings joined; the prefix's trailing whitespace moved to the variable part, as `render` does."""
        out: list = []
        prefix: list | None = None
        for literal, fld in self.pieces:
            out.append(literal)
            if fld == "hypothesis":
                prefix = _joined(out)
                out.append(hypothesis)
            elif fld == "premise":
                out.extend(premise)
        assert prefix is not None
        if prefix and isinstance(prefix[-1], str):
            prefix[-1] = prefix[-1].rstrip()
        return _joined(out), [p for p in prefix if p != ""]


def _joined(pieces: list) -> list:
    """Adjacent strings joined, empty ones dropped."""
    out: list = []
    for p in pieces:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif p != "":
            out.append(p)
    return out
