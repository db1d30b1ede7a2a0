"""The CSV reader (`.csv`, and `.tsv` with a tab for the comma; optionally `.gz` / `.zst`): records named by
line (csv_records.py), every cell text, so the kept columns are strings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from . import csv_records
from .base import Chunk, Reader, open_binary, register


def _delim(path: str | Path) -> str:
    """A CSV-family input's delimiter: a tab for .tsv (also .tsv.gz / .tsv.zst), else a comma."""
    return "\t" if ".tsv" in [x.lower() for x in Path(path).suffixes[-2:]] else ","


@register("csv")
class CsvReader(Reader):
    title = "CSV"
    extensions = (".csv", ".tsv")

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        f = open_binary(path, compression)
        return csv_records.record_chunks(f, str(path), chunk_rows, hasher, _delim(path))

    def columns(self, path: Path, compression: str | None) -> set[str] | None:
        return set(csv_records.columns(open_binary(path, compression), str(path), _delim(path)))

    def has_rows(self, path: Path, compression: str | None) -> bool:
        # the whole file: a quote never closed fails the job before the model loads
        return self.count(path, compression) > 0

    def count(self, path: Path, compression: str | None) -> int:
        return csv_records.count(open_binary(path, compression), str(path), _delim(path))

    def kept_types(self, path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
        return dict.fromkeys(keep, pa.string())
