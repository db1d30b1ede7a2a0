"""The CSV and TSV writers: the header once, nested columns (lists, structs, maps) as JSON text."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from .base import WRITERS, Writer


def csv_ready(t: pa.Table) -> pa.Table:
    """Nested columns (lists, structs, maps) as JSON text, so a CSV cell holds `["true", "false"]`."""
    cols = []
    for c in t.columns:
        if pa.types.is_nested(c.type):
            c = pa.array(
                [None if v is None else json.dumps(v, ensure_ascii=False) for v in c.to_pylist()], pa.string()
            )
        cols.append(c)
    return pa.table(cols, names=t.column_names)


@WRITERS.register("csv")
class CsvWriter(Writer):
    delimiter = ","

    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[bytes, bytes] | None = None):
        import pyarrow.csv as pacsv

        opts = pacsv.WriteOptions(delimiter=self.delimiter)
        self.w = pacsv.CSVWriter(path, csv_ready(schema.empty_table()).schema, write_options=opts)

    def write_table(self, t: pa.Table) -> None:
        self.w.write_table(csv_ready(t))

    def close(self) -> None:
        self.w.close()


@WRITERS.register("tsv")
class TsvWriter(CsvWriter):
    delimiter = "\t"
