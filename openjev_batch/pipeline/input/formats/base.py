"""What every input format's reader is (`Reader`), the registry of them (`READERS`, by format name), and the
decompressing binary stream the text formats read through (`open_binary`)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ....registry import Registry

Chunk = list[tuple[int, Any]]  # (position, record dict or the error text of an unreadable line)


class Reader:
    """One input format: its records in chunks, and the few questions a job asks of an input before reading
    it. `name` is the format's (set by `READERS.register`), `title` names it in messages, `extensions` the
    file endings that are it (a folder's format is claimed by `claims_folder`), `compressible` whether a
    `.gz` / `.zst` ending may follow. An exception of `failures` (other than InputFileError) while reading
    becomes the job's InputFileError "cannot read as TITLE" (formats.record_chunks); any other propagates.
    The defaults are a format that has no schema: no columns, no kept types, no count up front."""

    name = ""
    title = ""
    extensions: tuple[str, ...] = ()
    compressible = True
    schema_title = "Arrow"  # what the repeated-column check calls the schema
    failures: type[BaseException] | tuple[type[BaseException], ...] = OSError

    def claims_folder(self, path: Path) -> bool:
        return False

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        raise NotImplementedError

    def columns(self, path: Path, compression: str | None) -> set[str] | None:
        """The column names, from a schema or header; None for a format without one."""
        return None

    def schemas(self, path: Path) -> list[tuple[Path, list[str]]]:
        """(file, its Arrow schema's names) per file, for the repeated-column check; [] without a schema."""
        return []

    def has_rows(self, path: Path, compression: str | None) -> bool:
        return next(self.chunks(path, compression, 1), None) is not None

    def count(self, path: Path, compression: str | None) -> int | None:
        """The rows, counted up front (a progress total); None when the format cannot say cheaply."""
        return None

    def kept_types(self, path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
        return None

    def may_have_images(self, path: Path, compression: str | None) -> bool:
        """Whether a row may carry an image (an `image` / `images` column, an image part in a message), read
        before the engine starts (pipeline.job.choose_images). Text formats: a scan of the raw bytes for such
        a JSON key (`"image":`, `"images":`, `"image_url":`; CSV cells double the quotes) or a CSV header
        naming one. It may say yes for a row that has none (a key inside a string value): that only starts
        an engine that takes images."""
        if (self.columns(path, compression) or set()) & IMAGE_KEYS:
            return True
        with open_binary(path, compression) as f:
            return scan_for_image_keys(iter(lambda: f.read(1 << 22), b""))


IMAGE_KEYS = frozenset({"image", "images", "image_url"})
IMAGE_KEY_PATTERN = r'"(?:image|images|image_url)""?\s*:'  # RE2 (pyarrow.compute) and Python alike
_IMAGE_KEY = re.compile(IMAGE_KEY_PATTERN.encode())


def scan_for_image_keys(pieces: Iterable[bytes]) -> bool:
    """Whether the bytes of `pieces`, read in order, hold a JSON key naming an image (IMAGE_KEYS). A key cut
    between two pieces is found: each piece is searched with the end of the one before."""
    tail = b""
    for piece in pieces:
        if _IMAGE_KEY.search(tail + piece):
            return True
        tail = piece[-32:]
    return False


READERS: Registry[type[Reader]] = Registry("input format", base=Reader)


def register(name: str):
    """Class decorator: `@register("jsonl")` makes the class the reader of format `name`."""

    def add(cls: type[Reader]) -> type[Reader]:
        cls.name = name
        return READERS.register(name)(cls)

    return add


class _RawStream(io.RawIOBase):
    """A pyarrow input stream as a Python raw stream, so io.BufferedReader can split it into lines
    (pyarrow's own readline does not work on decompressing streams)."""

    def __init__(self, f):
        self.f = f

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.f.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.f.close()
        super().close()


def open_binary(path: Path, compression: str | None):
    """A buffered binary file object over `path`, decompressing gzip/zstd on the fly (pyarrow's codecs)."""
    if compression is None:
        return open(path, "rb")
    return io.BufferedReader(_RawStream(pa.input_stream(path, compression=compression)), 1 << 20)
