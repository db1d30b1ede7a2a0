"""The classifier-head readout's prompt stage: a row's whole prompt tokenized as text, split into the shared
prefix and its one branch. An image row's images take the markup and the image-token count the checkpoint's
chat template and image processor give an image (readouts/image_prompt.py), where its premise has them;
the text between them is tokenized as text (the markup is control tokens, which the tokenizer cuts at anyway,
so the ids equal the checkpoint's processor's for the same text). The images sit in the prefix."""

from __future__ import annotations

from ...core import BranchSpec, RowPrompt, lcp
from ...images import ImageProblem
from ..base import Failed
from ..image_prompt import ImageSlots
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


def wrapping(text: TextTokenizer) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids the model's tokenizer puts before and after a prompt (BOS / [CLS] … [SEP]; none for Qwen)."""
    bare, wrapped = text.encode(["a"])[0], text.encode(["a"], specials=True)[0]
    k = next((i for i in range(len(wrapped) - len(bare) + 1) if wrapped[i : i + len(bare)] == bare), 0)
    return wrapped[:k], wrapped[k + len(bare) :]


def image_prompt(row: ClsRow, text: TextTokenizer, slots: ImageSlots, wrap) -> RowPrompt:
    """An image row's RowPrompt: its pieces' ids (each image its markup), the prefix up to the hypothesis when
    every image is before it, else the whole prompt. Raises ImageProblem."""
    texts = [p for p in (*row.pieces, *row.prefix_pieces) if isinstance(p, str)]
    enc = dict(zip(texts, text.encode(texts), strict=True)) if texts else {}

    def ids(pieces) -> tuple[int, ...]:
        return tuple(i for p in pieces for i in (enc[p] if isinstance(p, str) else slots.markup_ids(p)))

    head, tail = wrap
    whole = (*head, *ids(row.pieces), *tail)
    k = len(whole)
    if sum(not isinstance(p, str) for p in row.prefix_pieces) == len(row.images) and row.prefix_text is not None:
        k = lcp(whole, (*head, *ids(row.prefix_pieces)))
    return RowPrompt(row.pos, row.id, whole[:k], (BranchSpec("", whole[k:], ()),), tuple(row.images))


class ClassifierPrompter:
    """The prompt stage of this readout: one branch per row; only an image the model cannot take fails
    here (too-long rows are the backend's row errors, against the model's real input limit).
    `image_input`: the input has an image column, so a model that takes no images is refused (ConfigError)."""

    def __init__(self, tokenizer, image_input: bool = False):
        self.tok = tokenizer
        self.text = self.tokenizer = TextTokenizer(tokenizer)  # built once: content never becomes markup
        self.images = ImageSlots(self)  # loads the image processor on first use (text jobs never do)
        self._wrap: tuple | None = None
        if image_input:
            self.images.check()

    @property
    def image_id(self) -> int | None:
        return self.images.image_id

    def build_many(self, rows: list[ClsRow]) -> list[tuple[RowPrompt | None, tuple]]:
        text = [r for r in rows if not r.images]
        built = iter(build_prompts(text, self.tokenizer))
        out: list[tuple[RowPrompt | None, tuple]] = []
        for r in rows:
            if not r.images:
                out.append((next(built), ()))
                continue
            if self._wrap is None:
                self._wrap = wrapping(self.text)
            try:
                out.append((image_prompt(r, self.text, self.images, self._wrap), ()))
            except ImageProblem as e:
                field = "image" if len(r.images) == 1 else "images"
                out.append((None, (Failed("", f"row {r.id}: {field}: {e}"),)))
        return out
