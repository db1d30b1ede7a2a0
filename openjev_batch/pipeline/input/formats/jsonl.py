"""The JSONL reader (`.jsonl`, `.ndjson`, optionally `.gz` / `.zst`): one object per line (json_records.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .base import Chunk, Reader, open_binary, register
from .json_records import count_lines, jsonl_records


@register("jsonl")
class JsonlReader(Reader):
    title = "JSONL"
    extensions = (".jsonl", ".ndjson")

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        return jsonl_records(open_binary(path, compression), chunk_rows, hasher)

    def count(self, path: Path, compression: str | None) -> int | None:
        return count_lines(open_binary(path, compression))
