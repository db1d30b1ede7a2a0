"""The classifier-head readout's prompt stage: a row's whole prompt tokenized as text, split into the shared
prefix and its one branch."""

from __future__ import annotations

from ...core import BranchSpec, RowPrompt, lcp
from ..text import TextTokenizer
from .rows import ClsRow


def build_prompts(rows: list[ClsRow], tokenizer) -> list[RowPrompt]:
    """Tokenize each row's whole prompt (batched; each distinct prefix text once) and split the ids into
    the shared prefix (an exact prefix of the ids) and the rest, the row's one branch. Text rows are all
    prefix. The row's text is data: a control string in it (`<|endoftext|>`, `<|im_end|>`) stays text
    (`TextTokenizer`); only the model's own wrapping (BOS, [CLS] … [SEP]) is added, as its tokenizer does."""
    if not rows:
        return []
    text = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer(tokenizer)
    full = text.encode([r.text for r in rows], specials=True)
    distinct = sorted({r.prefix_text for r in rows if r.prefix_text})
    pre = dict(zip(distinct, text.encode(distinct, specials=True) if distinct else [], strict=True))
    out = []
    for r, ids in zip(rows, full, strict=True):
        ids = tuple(ids)
        k = lcp(ids, pre[r.prefix_text]) if r.prefix_text else len(ids)  # both tuples (lcp compares slices)
        out.append(RowPrompt(r.pos, r.id, ids[:k], (BranchSpec("", ids[k:], ()),)))
    return out


def prompt_ids(rp: RowPrompt) -> tuple[int, ...]:
    """The ids a classifier row runs: its prefix and its one branch."""
    return rp.prefix + rp.branches[0].suffix


class ClassifierPrompter:
    """The prompt stage of this readout: one branch per row, nothing fails here (too-long rows are the
    backend's row errors, against the model's real input limit)."""

    def __init__(self, tokenizer):
        self.tokenizer = TextTokenizer(tokenizer)  # built once: content never becomes markup

    def build_many(self, rows: list[ClsRow]) -> list[tuple[RowPrompt, tuple]]:
        return [(rp, ()) for rp in build_prompts(rows, self.tokenizer)]
