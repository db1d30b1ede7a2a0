"""Images in the label readout's prompt. A row's images go in the user turn: the `image` / `images` column's
first, then the transcript with each content-part image where the message has it::

    [user]   <image 1>…Text:\\n<text>     or     Conversation:\\nuser: <image>What is shown?

Each image is the markup the checkpoint's own chat template renders for an image part (Qwen3.5/3.6:
`<|vision_start|><|image_pad|><|vision_end|>`, found at start-up by rendering a user turn of text, image,
text), its image token repeated as many times as the checkpoint's own image processor makes tokens of an
image of that size (`get_number_of_image_patches` ÷ merge_size²; the processor's `smart_resize`, no pixels
read). The text between images is tokenized as text (prompt.py); the image markup is control tokens, which
the tokenizer cuts at anyway, so the ids equal the processor's for the same conversation. The images sit
in the prefix, shared by every question of the row.

A model takes images when its chat template renders image markup and it has an image processor; otherwise
every image row fails naming the field, and a job whose input has an image column is refused at start
(`check`)."""

from __future__ import annotations

from typing import Any, cast

from ..errors import ConfigError
from ..images import ImageProblem, ImageRef
from .rows_images import has_images
from .text import TextTokenizer

# the image processor, the ids before and after an image's tokens, the image token's id
_Markup = tuple[Any, tuple[int, ...], tuple[int, ...], int]
_A, _B = "\ue000openjev-a\ue001", "\ue000openjev-b\ue001"  # start-up rendering only (as prompt.py's slots)


class ImageSlots:
    """The image part of one Prompter; loads the image processor on first use (text jobs never do)."""

    def __init__(self, prompter):
        self.p = prompter
        self._ready: _Markup | str | None = None  # loaded, or why the model takes no images

    @property
    def model(self) -> str:
        return str(getattr(self.p.tok, "name_or_path", "") or "?")

    def problem(self) -> str | None:
        """Why this model takes no images (None: it does)."""
        if self._ready is None:
            try:
                self._ready = self._load()
            except ImageProblem as e:
                self._ready = str(e)
        return self._ready if isinstance(self._ready, str) else None

    def check(self) -> None:
        """Raise ConfigError (at start) when the model takes no images."""
        if (why := self.problem()) is not None:
            raise ConfigError(f"the input has an image column, but {why}")

    def _markup(self) -> _Markup:
        """The image processor, the ids before and after an image's tokens, and the image token's id. Raises
        ImageProblem when the model takes no images."""
        if (why := self.problem()) is not None:
            raise ImageProblem(why)
        return cast(_Markup, self._ready)  # problem() loaded it, and it is no reason

    def _load(self) -> _Markup:
        tok = self.p.tok
        kw = dict(tokenize=False, add_generation_prompt=True, enable_thinking=False)
        parts = [{"type": "text", "text": _A}, {"type": "image"}, {"type": "text", "text": _B}]
        try:
            text = tok.apply_chat_template([{"role": "user", "content": parts}], **kw)
        except Exception as e:  # noqa: BLE001 - a template that refuses content parts
            raise ImageProblem(f"the model {self.model} takes no images: its chat template refuses "
                               f"image parts ({type(e).__name__}: {e})") from None  # fmt: skip
        if _A not in text or _B not in text or text.find(_A) > text.find(_B):
            raise ImageProblem(f"the model {self.model} takes no images: its chat template drops content parts")
        markup = text.split(_A, 1)[1].split(_B, 1)[0]
        if not markup:
            raise ImageProblem(f"the model {self.model} takes no images: its chat template drops them")
        pieces = self.p.text.markup(markup)
        image_token = getattr(tok, "image_token", None) or "<|image_pad|>"
        image_id = self.p.text.control.get(image_token)
        ids = [x for x in pieces if isinstance(x, int)]
        if any(isinstance(x, str) and x for x in pieces) or image_id is None or ids.count(image_id) != 1:
            raise ImageProblem(
                f"the chat template of {self.model} marks an image as {markup!r}: control tokens around one "
                f"{image_token} are supported"
            )
        k = ids.index(image_id)
        from transformers import AutoImageProcessor

        try:
            ip = AutoImageProcessor.from_pretrained(self.model)
        except Exception as e:  # noqa: BLE001 - no preprocessor_config.json, or an unknown processor
            raise ImageProblem(f"the model {self.model} takes no images: no image processor ({e})") from None
        if not hasattr(ip, "get_number_of_image_patches") or not hasattr(ip, "merge_size"):
            raise ImageProblem(f"the image processor {type(ip).__name__} of {self.model} is not supported")
        return ip, tuple(ids[:k]), tuple(ids[k + 1 :]), image_id

    def n_tokens(self, image: ImageRef) -> int:
        """The image tokens the model reads for `image`. Raises ImageProblem (e.g. an aspect ratio past the
        processor's limit)."""
        ip = self._markup()[0]
        try:
            return int(ip.get_number_of_image_patches(image.height, image.width, {})) // int(ip.merge_size) ** 2
        except ValueError as e:
            raise ImageProblem(f"{image.source}: {e}") from None

    def markup_ids(self, image: ImageRef) -> tuple[int, ...]:
        """The ids one image takes in a prompt: its markup around its image tokens (the classifier-head readout
        puts them where the template's premise goes). Raises ImageProblem."""
        n = self.n_tokens(image)
        _, before, after, image_id = self._markup()
        return (*before, *[image_id] * n, *after)

    @property
    def image_id(self) -> int | None:
        return None if self.problem() else self._markup()[3]

    def prefix(self, row, cut: str) -> tuple[tuple[int, ...], tuple[ImageRef, ...]]:
        """The prefix ids of an image row (body pieces + `cut`, the SEP share of the prefix) and its images in
        their order. Raises ImageProblem."""
        _, before, after, image_id = self._markup()
        pieces = body_pieces(row)
        if isinstance(pieces[-1], str):
            pieces[-1] += cut
        else:
            pieces.append(cut)
        ids: list[int] = list(self.p._pre)
        run = self.p._pre_run
        images = []
        for piece in pieces:
            if isinstance(piece, str):
                run += piece
                continue
            ids.extend(self.p.text.encode([run])[0] if run else ())
            run = ""
            ids.extend((*before, *[image_id] * self.n_tokens(piece), *after))
            images.append(piece)
        ids.extend(self.p.text.encode([run])[0] if run else ())
        return tuple(ids), tuple(images)


def check_model_takes_images(model: str, trust_remote_code: bool = False) -> None:
    """Raise ConfigError when `model` takes no images (its tokenizer's template and its image processor are
    read; no weights), for a job whose input has an image column, before its model loads."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - the backend's loader reports an unloadable model with its own message
        return
    ImageSlots(SimpleNamespace(tok=tok, text=TextTokenizer(tok))).check()


def body_pieces(row) -> list[Any]:
    """Prompter.body(row) with the row's images where they go: text strings and ImageRefs, adjacent strings
    joined, the last text's trailing whitespace dropped (as `body` drops it)."""
    raw: list[Any] = list(row.images)
    if row.plain:
        raw.append(f"Text:\n{row.messages[0].content}")
    else:
        raw.append("Conversation:\n")
        for k, m in enumerate(row.messages):
            raw.append(("\n\n" if k else "") + f"{m.role}: ")
            raw.extend(m.parts or (m.content,))
    out: list[Any] = []
    for p in raw:
        if isinstance(p, str) and out and isinstance(out[-1], str):
            out[-1] += p
        elif not (isinstance(p, str) and not p):
            out.append(p)
    if isinstance(out[-1], str):
        out[-1] = out[-1].rstrip()
    return out


def image_fields(row) -> str:
    """The field an image problem of `row` names: its image column, or the content parts of its messages."""
    if row.images:
        return "image" if len(row.images) == 1 else "images"
    return "state.messages"


__all__ = ["ImageSlots", "body_pieces", "has_images", "image_fields"]
