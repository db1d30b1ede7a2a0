"""The Parquet reader (`.parquet`, `.pq`; not compressed outside, Parquet compresses inside): record batches
rechunked to the job's chunks (arrow_records.py), the schema's columns and types, the row count from the
metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .arrow_records import arrow_may_have_images, rechunk
from .base import Chunk, Reader, register


@register("parquet")
class ParquetReader(Reader):
    title = "Parquet"
    extensions = (".parquet", ".pq")
    compressible = False
    schema_title = "Parquet"
    failures = Exception

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        return rechunk(pq.ParquetFile(path).iter_batches(batch_size=chunk_rows), chunk_rows, hasher)

    def columns(self, path: Path, compression: str | None) -> set[str] | None:
        return set(pq.read_schema(path).names)

    def may_have_images(self, path: Path, compression: str | None) -> bool:
        f = pq.ParquetFile(path)
        return arrow_may_have_images(f.schema_arrow, f.iter_batches(batch_size=65_536))

    def schemas(self, path: Path) -> list[tuple[Path, list[str]]]:
        return [(path, pq.read_schema(path).names)]

    def has_rows(self, path: Path, compression: str | None) -> bool:
        return self.count(path, compression) > 0

    def count(self, path: Path, compression: str | None) -> int:
        return pq.ParquetFile(path).metadata.num_rows

    def kept_types(self, path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
        schema = pq.read_schema(path)
        return {k: schema.field(k).type for k in keep}
