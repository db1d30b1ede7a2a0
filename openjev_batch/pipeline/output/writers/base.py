"""What every output format's writer is (`Writer`: tables of one schema in, one file out, a context manager
that closes the file) and the registry of them (`WRITERS`, by the format name options.output_format gives)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ....registry import Registry


class Writer:
    """Writes tables of one schema to `path` (opened here); `metadata` goes into a file format's key-value
    metadata where it has one (`carries_metadata`: Parquet; the text formats ignore it, their manifest is a
    sidecar, manifest.py)."""

    carries_metadata = False

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[bytes, bytes] | None = None):
        raise NotImplementedError

    def write_table(self, t: pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


WRITERS: Registry[type[Writer]] = Registry("output format", base=Writer)
