"""The Parquet writer: the job's manifest in the file's key-value metadata."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .base import WRITERS, Writer


@WRITERS.register("parquet")
class ParquetWriter(Writer):
    carries_metadata = True

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[bytes, bytes] | None = None):
        self.w = pq.ParquetWriter(path, schema.with_metadata(metadata) if metadata else schema)

    def write_table(self, t: pa.Table) -> None:
        self.w.write_table(t)

    def close(self) -> None:
        self.w.close()
