"""The classifier-head readout's input rows: `text`, or `premise` + `hypothesis` through the template, checked
as `run` checks its values; an `image` / `images` column (the rules and limits of `run`'s: images.py,
rows_images.py) is the premise's image(s), placed after the premise's text where the template has
``{premise}`` (the openjev NLI form: "A photograph of a scene:" + the image), or before a `text` row's text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core import RowError, checked_row_id, unidentified_row_error
from ...values import MAX_STATE_BYTES, kept_values, text_bytes, text_field
from ..rows_images import resolve_images
from .template import TEMPLATE_FIELDS, Template


@dataclass(frozen=True)
class ClsRow:
    """A readable row: its prompt `text` and, for premise/hypothesis rows, the shared `prefix_text`. An image
    row also has its `images` (ImageRefs) and its prompt as `pieces` (text strings and ImageRefs in order) and
    its prefix's `prefix_pieces`; its `text` is then the text pieces joined (for messages only)."""

    pos: int
    id: str
    text: str
    prefix_text: str | None
    kept: dict[str, Any]
    images: tuple[Any, ...] = ()
    pieces: tuple[Any, ...] = ()
    prefix_pieces: tuple[Any, ...] = ()


def _str_field(rec: dict[str, Any], name: str, rid: str) -> str:
    try:
        return text_field(rec, name)
    except ValueError as e:
        raise ValueError(f"row {rid}: {e}") from None


def parse_cls_row(
    pos: int, rec: dict[str, Any], template: Template, keep: tuple[str, ...] = (), image_root: str | None = None
) -> ClsRow | RowError:
    """One input record → ClsRow or RowError (never raises). A row has `text`, or the template's
    fields (`premise` + `hypothesis`), not both. The values get `run`'s checks (values.py): a lone
    surrogate or an undecodable cell in the id, a text field or a kept column is the row's error. Images
    are read and checked here, before any model call; `image_root`: the input file's folder."""
    kept, kept_problem = kept_values(rec, keep)
    rid, id_problem = checked_row_id(rec.get("id"), pos)
    if id_problem:
        return unidentified_row_error(pos, f"id: {id_problem}", kept=kept)
    try:
        has_pair = any(rec.get(f) is not None for f in TEMPLATE_FIELDS)
        if rec.get("text") is not None:
            if has_pair:
                raise ValueError(f"row {rid}: text: give either text or premise + hypothesis, not both")
            text, prefix = _str_field(rec, "text", rid), None
        elif not has_pair:
            raise ValueError(f"row {rid}: text: missing (give text, or premise + hypothesis)")
        else:
            vals = {f: (_str_field(rec, f, rid) if f in template.fields else "") for f in TEMPLATE_FIELDS}
            text, prefix = template.render(vals["premise"], vals["hypothesis"])
            if (n := text_bytes(text)) > MAX_STATE_BYTES:  # each field is within it, the prompt is not
                raise ValueError(
                    f"row {rid}: premise + hypothesis: {n:,} bytes of text, limit {MAX_STATE_BYTES:,}"
                )
        if kept_problem:  # after the text's own problems, in the order `run` names them
            raise ValueError(f"row {rid}: {kept_problem}")
        images, _, problem = resolve_images(rec, (), image_root)
        if problem:
            raise ValueError(f"row {rid}: {problem}")
        if not images:
            return ClsRow(pos, rid, text, prefix, kept)
        if prefix is None:
            pieces, pre = [*images, text], [*images, text]
        elif "premise" not in template.fields:
            raise ValueError(f"row {rid}: image: the template has no {{premise}} to put the image in")
        else:
            pieces, pre = template.parts((vals["premise"], *images), vals["hypothesis"])
        joined = "".join(p for p in pieces if isinstance(p, str))
        return ClsRow(pos, rid, joined, prefix, kept, tuple(images), tuple(pieces), tuple(pre))
    except ValueError as e:
        return RowError(pos, rid, str(e), kept=kept)
    except Exception as e:  # a bad row never sinks the job
        return RowError(pos, rid, f"row {rid}: {type(e).__name__}: {e}", kept=kept)
