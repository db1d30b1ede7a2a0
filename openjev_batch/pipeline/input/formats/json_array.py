"""The JSON reader (`.json`, optionally `.gz` / `.zst`): one array of objects, read whole (json_records.py);
no count up front (it is read whole anyway)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .base import Chunk, Reader, open_binary, register
from .json_records import json_records


@register("json")
class JsonReader(Reader):
    title = "JSON"
    extensions = (".json",)

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        return json_records(open_binary(path, compression), str(path), chunk_rows, hasher)
