"""Images in a row: where they come from (a path, Parquet bytes, a `data:` URL), how they are read safely, and
their limits. Every check runs when a row is parsed, before any model call, and a bad image is a problem text
(the caller names the row and the field), never an exception past the row.

Rules:
- **No URL is fetched** (the product runs offline): `http(s)://`, `file://` and every other scheme are refused;
  a `data:image/…;base64,` URL is bytes given inline and is read.
- **Only what the user named is read**: a relative path is resolved against the input file's folder and must
  stay inside it once symlinks are followed (`../x.png`, or a link in that folder pointing out, is refused);
  an absolute path is read as written (the row names it). Rows given as values (the Python API) have no input
  folder: their paths must be absolute. Only regular files are opened (a FIFO or `/dev/zero` would hang or
  never end), without following a final symlink a second time (opened by its resolved path).
- **Sizes are bounded** before decoding: MAX_IMAGE_BYTES of file, MAX_IMAGE_PIXELS of width × height (read
  from the header: a 50,000 × 50,000 PNG of a few KB is refused unread), MAX_IMAGES_PER_ROW.
- **Formats**: FORMATS, decoded by Pillow; a file Pillow cannot decode whole (truncated, corrupt) is refused.

A file image is kept as its resolved path and sha256 (a chunk of rows never holds every file's bytes); the
backend reads it again when the row runs and refuses it if its content changed. Bytes given inline are kept.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import one_line

MAX_IMAGE_BYTES = 20 * 2**20  # one image file or inline value
MAX_IMAGE_PIXELS = 40_000_000  # width × height (an 8K photo is 33 M); decoding takes 3 bytes a pixel
MAX_IMAGES_PER_ROW = 16
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")  # Pillow's format names
LIMITS_TEXT = (
    f"at most {MAX_IMAGES_PER_ROW} images a row, {MAX_IMAGE_BYTES // 2**20} MiB and "
    f"{MAX_IMAGE_PIXELS:,} pixels an image, formats {', '.join(FORMATS)}"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_DATA_URL = re.compile(r"^data:image/[A-Za-z0-9.+-]+;base64,", re.IGNORECASE)


def _kind(v: Any) -> str:
    """What a value is in the words of the JSON a user wrote (values.kind_of's, on this floor: images.py
    imports nothing of the package)."""
    words = {bool: "true or false", str: "text", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "null" if v is None else next((w for t, w in words.items() if isinstance(v, t)), "a value of another kind")


class ImageProblem(ValueError):
    """Why an image cannot be used (the message names neither row nor field: the caller adds them)."""


@dataclass(frozen=True)
class ImageRef:
    """A validated image: `sha256` of its bytes, `width` × `height` in pixels, its `format`; `path` (a file,
    resolved) or `data` (bytes given inline). `source` is what the row said (a path as written, or
    `<N bytes>`), for messages and `--show-prompt`."""

    sha256: str
    width: int
    height: int
    format: str
    source: str
    path: str | None = None
    data: bytes | None = field(default=None, repr=False)

    def read_bytes(self) -> bytes:
        """The image's bytes; raises ImageProblem when a file changed or vanished since it was checked."""
        if self.data is not None:
            return self.data
        try:
            data = _read_regular(Path(self.path or ""))
        except OSError as e:
            raise ImageProblem(f"{self.source}: cannot be read any more ({e.strerror or e})") from None
        if hashlib.sha256(data).hexdigest() != self.sha256:
            raise ImageProblem(f"{self.source}: the file changed since the row was read")
        return data

    def load(self):
        """The decoded image in RGB (a PIL.Image), as the model's processor takes it."""
        from PIL import Image

        with Image.open(io.BytesIO(self.read_bytes())) as im:
            return im.convert("RGB")


def _read_regular(path: Path) -> bytes:
    """A regular file's bytes, at most MAX_IMAGE_BYTES (+1 to tell a larger one). Raises OSError; ImageProblem
    for something that is not a regular file (opened non-blocking, then checked: a FIFO never blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ImageProblem(f"{path}: not a regular file")
        if st.st_size > MAX_IMAGE_BYTES:
            raise ImageProblem(f"{st.st_size:,} bytes, limit {MAX_IMAGE_BYTES:,}")
        return f.read(MAX_IMAGE_BYTES + 1)


def resolve_path(value: str, root: str | None) -> Path:
    """The file a row's image path names, resolved (symlinks followed). Raises ImageProblem for a URL, a
    relative path without an input folder or leaving it, a missing file."""
    if value[:5].lower() == "data:":  # not a data:image/…;base64 URL (_DATA_URL): it is no image given inline
        kind = value[5:].partition(",")[0][:60] or "no type"
        raise ImageProblem(f"a data: URL of {one_line(kind)}, not an image's base64 bytes (give "
                           "data:image/<format>;base64,<data>, or a file path)")  # fmt: skip
    if _SCHEME.match(value):
        raise ImageProblem(f"{value[:60]!r}: URLs are not fetched (the product runs offline); give a file path")
    if "\x00" in value:
        raise ImageProblem("a path holds a NUL character")
    p = Path(value).expanduser() if value.startswith("~") else Path(value)
    if not p.is_absolute() and root is None:
        raise ImageProblem(f"{value!r}: a relative path needs an input file (its folder); give an absolute path")
    base = Path(root).resolve() if root is not None else None
    if base is not None and not p.is_absolute():
        p = base / p
    try:
        real = p.resolve()
        real.exists()  # a name too long for the file system raises here
    except (RuntimeError, OSError) as e:  # Python 3.11 raises RuntimeError on a loop; 3.13 OSError (ELOOP)
        why = "a symbolic link loop (a link that leads back to itself)" if isinstance(e, RuntimeError) else (e.strerror or "cannot be read")
        raise ImageProblem(f"{value!r}: {why[:1].lower()}{why[1:]}") from None
    # inside the input's folder as written (relative, or absolute into it): inside it once links are followed
    inside = base is not None and Path(os.path.normpath(p)).is_relative_to(base)
    if base is not None and (inside or not Path(value).is_absolute()) and not real.is_relative_to(base):
        why = "a symlink out of" if inside and _has_link(base, Path(os.path.normpath(p)).relative_to(base)) else "outside"
        raise ImageProblem(f"{value!r}: {why} the input's folder {base}; only files inside it are read")
    if not real.exists():
        raise ImageProblem(f"{value!r}: no such file")
    return real


def _has_link(base: Path, rel: Path) -> bool:
    """Whether any part of `base / rel` (below `base`) is a symlink (to tell `../x` from a link out)."""
    cur = base
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            return True
    return False


def _from_data_url(value: str) -> bytes:
    head, _, payload = value.partition(",")
    if len(payload) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise ImageProblem(f"data URL over {MAX_IMAGE_BYTES:,} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageProblem("data URL: invalid base64") from None


def check_image(data: bytes, source: str, path: str | None = None) -> ImageRef:
    """Validate an image's bytes (size, format, pixel count, a full decode). Raises ImageProblem."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise ImageProblem(f"{source}: empty (0 bytes)")
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageProblem(f"{source}: {len(data):,} bytes, limit {MAX_IMAGE_BYTES:,}")
    try:
        with warnings.catch_warnings():  # Pillow warns of 89–179 M pixels on open; ours refuses them below
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
        with im:
            fmt, (w, h) = im.format or "?", im.size
            # a phone's JPEG with a second picture (Multi-Picture Format: a depth map, a preview) opens as MPO;
            # its first picture is a JPEG, which is what every reader decodes (refused as "MPO": issue 42)
            fmt = "JPEG" if fmt == "MPO" else fmt
            if fmt not in FORMATS:
                raise ImageProblem(f"{source}: unsupported format {fmt}; expected one of {', '.join(FORMATS)}")
            if w * h > MAX_IMAGE_PIXELS:  # from the header: refused before a byte is decoded
                raise ImageProblem(f"{source}: {w:,} × {h:,} pixels, limit {MAX_IMAGE_PIXELS:,} pixels")
            if w < 1 or h < 1:
                raise ImageProblem(f"{source}: {w} × {h} pixels")
            im.load()  # a truncated or corrupt file fails here, not in the model's processor
    except ImageProblem:
        raise
    except UnidentifiedImageError:
        raise ImageProblem(f"{source}: not an image Pillow can read (unknown or unsupported format)") from None
    except Image.DecompressionBombError as e:  # Pillow's own header check, past twice its warning size
        raise ImageProblem(f"{source}: over the limit of {MAX_IMAGE_PIXELS:,} pixels ({e})") from None
    except Exception as e:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, ValueError … for bad files
        raise ImageProblem(f"{source}: corrupt image ({e or 'cannot be decoded'})") from None
    return ImageRef(hashlib.sha256(data).hexdigest(), w, h, fmt, source, path, None if path else data)


def image_ref(value: Any, root: str | None) -> ImageRef:
    """One image value of a row (a path string, a `data:` URL, bytes, or a Hugging Face `{"bytes", "path"}`
    struct) → ImageRef. Raises ImageProblem."""
    if isinstance(value, dict) and set(value) <= {"bytes", "path"}:  # `datasets`' Image feature in Parquet
        value = value.get("bytes") or value.get("path")
    if isinstance(value, bytes | bytearray | memoryview):
        return check_image(bytes(value), f"<{len(value):,} bytes>")
    if not isinstance(value, str) or not value.strip():
        got = "an empty string" if isinstance(value, str) else _kind(value)
        raise ImageProblem(f"expected a file path, a data: URL or bytes, got {got}")
    if _DATA_URL.match(value):
        return check_image(_from_data_url(value), "<data URL>")
    path = resolve_path(value, root)
    try:
        data = _read_regular(path)
    except OSError as e:
        raise ImageProblem(f"{value!r}: cannot be read ({e.strerror or e})") from None
    except ImageProblem as e:
        raise ImageProblem(f"{value!r}: {e}") from None
    return check_image(data, one_line(value), str(path))  # its name in messages and --show-prompt


def image_list(value: Any, many: bool) -> list[Any]:
    """An `image` cell (one value) or an `images` cell (a list, or a JSON text of one) → the values, in order.
    Raises ImageProblem for a wrong type or too many."""
    import json

    if not many:
        return [value]
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ImageProblem(f"malformed JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(value, list | tuple):
        raise ImageProblem(f"expected a list of images, got {_kind(value)}")
    if len(value) > MAX_IMAGES_PER_ROW:
        raise ImageProblem(f"{len(value)} images, at most {MAX_IMAGES_PER_ROW} a row")
    return list(value)
