"""The images of a label-readout row: the `image` / `images` column, and `{"type": "image", "image": …}` parts
in a message's content (OpenAI style; `image_url` parts too). Read and checked by `openjev_batch.images` when
the row is parsed; a bad image is the row's error naming the field, e.g.
``row 7: state.messages[0].content[1].image: 'cat.png': no such file``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..images import MAX_IMAGES_PER_ROW, ImageProblem, image_list, image_ref

IMAGE_COLUMNS = ("image", "images")


@dataclass(frozen=True)
class PendingImage:
    """An image value of a content part, not read yet (parse_state has no input folder); `field` names it."""

    value: Any
    field: str


def content_parts(parts: list, where: str) -> tuple[str, tuple[Any, ...]]:
    """A message's content parts → (its text, its pieces: text strings and PendingImages in order). Raises
    ValueError naming the part."""
    texts: list[str] = []
    pieces: list[Any] = []
    for j, part in enumerate(parts):
        at = f"{where}[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise ValueError(f"{at}: expected an object with a 'type' (text or image)")
        kind = part["type"]
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{at}.text: expected a string")
            texts.append(part["text"])
            pieces.append(part["text"])
        elif kind == "image":
            if part.get("image") is None:
                raise ValueError(f"{at}.image: missing")
            pieces.append(PendingImage(part["image"], f"{at}.image"))
        elif kind == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if url is None:
                raise ValueError(f"{at}.image_url: missing")
            pieces.append(PendingImage(url, f"{at}.image_url"))
        else:
            raise ValueError(f"{at}.type: unsupported part type {kind!r}; expected text or image")
    return "".join(texts), tuple(pieces) if any(isinstance(p, PendingImage) for p in pieces) else ()


def resolve_images(rec: dict[str, Any], messages: tuple, root: str | None) -> tuple[tuple, tuple, str | None]:
    """(the column's images, `messages` with their PendingImages read, a problem naming its field or None).
    Every image of the row is read and checked here, before any model call (openjev_batch/images.py)."""
    given = [c for c in IMAGE_COLUMNS if rec.get(c) is not None]
    if len(given) > 1:
        return (), messages, "image, images: give one of the two columns, not both"
    column: list = []
    try:
        if given:
            c = given[0]
            for k, v in enumerate(image_list(rec[c], many=c == "images")):
                field = c if c == "image" else f"images[{k}]"
                column.append(_read(v, field, root))
    except _FieldProblem as e:
        return (), messages, str(e)
    except ImageProblem as e:
        return (), messages, f"{given[0]}: {e}"
    out = []
    n = len(column)
    try:
        for m in messages:
            if not m.parts:
                out.append(m)
                continue
            pieces = []
            for p in m.parts:
                if isinstance(p, PendingImage):
                    n += 1
                    if n > MAX_IMAGES_PER_ROW:
                        raise _FieldProblem(f"{p.field}: more than {MAX_IMAGES_PER_ROW} images in the row")
                    pieces.append(_read(p.value, f"state.{p.field}", root))
                else:
                    pieces.append(p)
            out.append(replace(m, parts=tuple(pieces)))
    except _FieldProblem as e:
        return (), messages, str(e)
    return tuple(column), tuple(out), None


class _FieldProblem(Exception):
    pass


def _read(value: Any, field: str, root: str | None):
    try:
        return image_ref(value, root)
    except ImageProblem as e:
        raise _FieldProblem(f"{field}: {e}") from None


def has_images(row: Any) -> bool:
    return bool(getattr(row, "images", ())) or any(m.parts for m in getattr(row, "messages", ()))


def image_key(row: Any, body: str) -> str:
    """`body` (the row's text) with its images' content hashes, where they go: the prefix key of the row."""
    if not has_images(row):
        return body
    where = [i.sha256 for i in row.images]  # then each message's pieces: where an image sits matters
    where += ["".join(p if isinstance(p, str) else f"\x1e{p.sha256}\x1e" for p in m.parts) for m in row.messages]
    return body + "\x1f" + "\x1f".join(where)


def input_has_image_column(path: Any) -> bool:
    """Whether the input file has an `image` / `images` column (its schema, or a JSONL/JSON file's first
    1,000 rows), so that a text-only model is refused at start. False when the file cannot be read (the
    reader reports that)."""
    # lazy: pyarrow's readers, keeps --help fast (the readouts load at --help)
    from ..pipeline.input.formats import input_columns, record_chunks

    try:
        names = input_columns(path)
        if names is None:
            first = next(record_chunks(path, 1000), [])
            names = {k for _, rec in first if isinstance(rec, dict) for k, v in rec.items() if v is not None}
    except Exception:  # noqa: BLE001 - an unreadable input is the reader's error, with its own message
        return False
    return bool(set(IMAGE_COLUMNS) & set(names))
