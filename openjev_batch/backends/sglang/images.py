"""Images on the sglang backend: an image row's requests carry its images beside the product's own ids.

sglang takes a request's images as raw images (then it decodes `input_ids` to text, runs the checkpoint's HF
processor over that text and re-tokenizes it: user text could turn into markup, and the ids would not be ours)
or as **processor output**, `{"format": "processor_output", "pixel_values", "image_grid_thw"}`. With processor
output and `input_ids` the tokenizer manager keeps the ids as given (sglang 0.5.19
`srt/multimodal/processors/base_processor.py:1150` `load_mm_data`: pre-tokenized ids + preprocessed data
return before any decode); the image tokens are found in them by the image token id (`get_mm_items_offset`),
split per image by `image_grid_thw` (`srt/managers/mm_utils.py:1110`), and the M-RoPE positions computed from
those offsets and grids (`srt/multimodal/processors/qwen_vl.py:840`). So the prefix the label readout built —
each image its chat-template markup around as many image tokens as the image processor makes
(`image_prompt.ImageSlots`) — reaches the model unchanged, and the pixels are the checkpoint's own image
processor's, as on hf (`backends/hf/vision.py`).

The radix cache keys an image token by a pad value derived from a hash of its pixels
(`MultimodalDataItem.set_pad_value`), so every request of a row must carry the row's images: the
prefix-only or first-branch request that computes the prefix, and each branch that then reuses it. A branch
without them would hold plain image token ids, which match no cached prefix (and have no pixels to embed).
"""

from __future__ import annotations

from typing import Any

from ...checkpoint.info import load_config
from ...core import BranchResult, Window
from ...images import ImageProblem

# the engine's multimodal start-up lives in vision_kwargs.py; engine.py, classifier.py and the tests ask it here
from .vision_kwargs import (  # noqa: F401
    choose_vision_attention,
    deepstack_indexes,
    died_on_images,
    fa3_imports,
    multimodal_kwargs,
    starts_multimodal,
    vision_overrides,
)

FORMAT = "processor_output"


def image_data(items: list[dict | None]) -> list[list[Any]] | None:
    """The `image_data` argument of one request batch, request by request: None when no request has an
    image; else a list per request, `[None]` for a text request beside image ones (sglang's batch
    normalisation reads a first entry that is not a list as "one image per request", so every entry is one).
    Pure."""
    if all(i is None for i in items):
        return None
    return [[i] for i in items]


def processor_output(pixel_values: Any, image_grid_thw: Any) -> dict[str, Any]:
    """One request's images as sglang takes preprocessed data: every image of the row in one item, in prompt
    order (sglang splits it per image by the grid)."""
    return {"format": FORMAT, "pixel_values": pixel_values, "image_grid_thw": image_grid_thw}


def token_count(image_grid_thw: Any, merge: int) -> int:
    """Image tokens a processor output of grid `image_grid_thw` ([N, 3]) fills: t·h·w ÷ merge² per image."""
    return int(sum(int(t) * int(h) * int(w) for t, h, w in image_grid_thw.tolist()) // merge**2)


def prefix_key(row: Any) -> tuple:
    """What makes two rows' prefixes one in the radix cache: the ids and the images' content (equal ids with
    other images of the same size are another prefix)."""
    return row.prefix, tuple(im.sha256 for im in row.images)


class ImageInputs:
    """The image processor of a vision-language checkpoint, turning a window's image rows into processor
    output once (every request of a row shares the one item)."""

    def __init__(self, model: str, image_id: int, trust_remote_code: bool = False):
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(model, trust_remote_code=trust_remote_code)
        self.merge = int(getattr(self.processor, "merge_size", 1))
        self.image_id = image_id
        self._items: dict[tuple, dict] = {}

    key = staticmethod(prefix_key)

    def prepare(self, rows: Any) -> dict[int, str]:
        """Process the images of `rows` (a window's); {row index: error text} for the rows whose images
        cannot be used (read again, decoded, or their token count differs from the prompt's). Drops the
        items of an earlier window."""
        self._items = {}
        errors: dict[int, str] = {}
        for i, row in enumerate(rows):
            if not row.images or self.key(row) in self._items:
                continue
            try:
                self._items[self.key(row)] = self._process(row)
            except ImageProblem as e:
                errors[i] = f"row {row.row_id}: image: {e}"
            except Exception as e:  # noqa: BLE001 - the image processor refusing an image is that row's error
                errors[i] = f"row {row.row_id}: image: the image processor failed ({type(e).__name__}: {e})"
        return errors

    def _process(self, row: Any) -> dict:
        out = self.processor(images=[im.load() for im in row.images], return_tensors="pt")
        grid = out["image_grid_thw"]
        want, have = token_count(grid, self.merge), sum(1 for t in row.prefix if t == self.image_id)
        if want != have:
            raise ImageProblem(f"the processor makes {want} image tokens, the prompt holds {have}")
        item = processor_output(out["pixel_values"], grid)
        if len(row.images) == 1:
            # the image's content hash, so sglang does not hash the pixel values again on every request of the
            # row (448 × 448 is 4.8 MB of float32: 3.8 ms a hash on the 2-core CPU machine, ~9 s of the tokenizer
            # manager's loop for W1's 256 rows × 9 requests; `resolve_multimodal_item_hash` reuses a given hash).
            # The pad values, the radix key, derive from it: equal for the same image, other for another. Several
            # images in one item are split by sglang and hashed by it (a given hash would name the whole item),
            # so an image shared by a one-image row and a several-image row is two keys: each computed once.
            item["hash"] = int(row.images[0].sha256[:15], 16)
        return item

    def item(self, row: Any) -> dict | None:
        """The processor output of `row`'s images (None for a text row), as `prepare` made it."""
        return self._items[self.key(row)] if row.images else None


def item_of(backend: Any, row: Any) -> dict | None:
    """`row`'s images for its requests on `backend` (None: a text row, or a backend without images)."""
    images = getattr(backend, "images", None)
    return images.item(row) if images is not None and row.images else None


def with_row_errors(window: Any, errors: dict[int, str], run) -> list:
    """`window`'s results: the rows in `errors` ({row index: error text}) answered with that error on every
    branch, the others run by `run(sub_window)` (a window of the rest, each counting its whole prefix)."""
    out = [[BranchResult((), len(r.prefix), 0, errors[i]) for _ in r.branches] if i in errors else None
           for i, r in enumerate(window.rows)]  # fmt: skip
    keep = [i for i in range(len(window.rows)) if i not in errors]
    if keep:
        sub = Window(tuple(window.rows[i] for i in keep), tuple(len(window.rows[i].prefix) for i in keep))
        for i, res in zip(keep, run(sub), strict=True):
            out[i] = res
    return out


def unsupported(backend: Any) -> str | None:
    """Why `backend`'s engine answers no image row (None: it does)."""
    if getattr(backend, "multi_item", False):
        # a pack's items follow each other in one sequence: an image prefix's M-RoPE positions and its pad
        # values in a packed request are not shown exact (multi_item.py); such rows keep an error
        return ("this sglang engine runs multi-item scoring, which takes no images; start one with "
                "--request-pattern first-branch or prefix-first, or use --backend hf")  # fmt: skip
    if getattr(backend, "images", None) is None:
        return getattr(backend, "no_images", None) or "the sglang engine takes no images for this model"
    return None


def prefill_window(backend: Any, window: Any, run) -> list:
    """`run(window)` for a window with image rows: each image row's images processed once (a bad one, or an
    engine that takes none, is that row's error naming the field; the other rows run)."""
    idx = [i for i, r in enumerate(window.rows) if r.images]
    if why := unsupported(backend):
        errors = {i: f"row {window.rows[i].row_id}: image: {why}" for i in idx}
    else:
        errors = backend.images.prepare(window.rows)
    return with_row_errors(window, errors, run) if errors else run(window)


def for_engine(opts: Any, kw: dict[str, Any], vision: bool) -> tuple[ImageInputs | None, str | None]:
    """(the image inputs of an engine started with `kw` for `opts.model`, or None and why it takes none).
    `vision`: the checkpoint is a vision-language one (`hf.vision.is_vision_checkpoint`)."""
    if not vision:
        return None, f"the model {opts.model} takes no images (no vision tower and image processor)"
    if kw.get("enable_multimodal") is False:
        if "enable_multimodal" in opts.sglang.engine_args:
            why = "--engine-arg enable_multimodal=false"
        elif getattr(opts, "images", None) is False:
            why = "its input had no images when it started"
        else:
            why = "a Qwen3.5/3.6 engine held open starts text only unless told the job has images"
        return None, (
            f"the sglang engine was started text only ({why}); the command line starts one that takes images "
            "when the input has them, the Python Classifier with images=True, or give "
            "--engine-arg enable_multimodal=true"
        )

    cfg = load_config(opts.model) or {}
    image_id = cfg.get("image_token_id", (cfg.get("text_config") or {}).get("image_token_id"))
    if image_id is None:
        return None, f"the model {opts.model} names no image_token_id in its config"
    return ImageInputs(opts.model, int(image_id), opts.trust_remote_code), None
