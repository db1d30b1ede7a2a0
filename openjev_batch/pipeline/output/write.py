"""Write: each input chunk's records to a crash-safe part under `<out>.partial/` with the job's manifest (the
`--resume` key), then the parts joined into the output (Parquet, JSONL, JSONL.gz, JSON, CSV or TSV), atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _finite(v: Any) -> Any:
    """`v` with every NaN / ±inf float as None: bare `NaN` tokens made a JSONL output that polars'
    read_ndjson and strict JSON parsers refuse (the hostile trial)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


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


class TableWriter:
    """Writes tables of one schema to `path` as Parquet, JSONL (one object per output row; `jsonl.gz`
    gzipped), JSON (one array of those objects) or CSV / TSV (header once; nested columns as JSON text).
    Used by the store's join (join.py) for the joined output; `metadata` goes into a Parquet file's
    key-value metadata (the text formats have none: their manifest is a sidecar, manifest.py)."""

    def __init__(self, path: Path, schema: pa.Schema, fmt: str, metadata: dict[bytes, bytes] | None = None):
        self.fmt, self.n = fmt, 0
        if fmt == "parquet":
            self.w = pq.ParquetWriter(path, schema.with_metadata(metadata) if metadata else schema)
        elif fmt in ("csv", "tsv"):
            import pyarrow.csv as pacsv

            opts = pacsv.WriteOptions(delimiter="\t" if fmt == "tsv" else ",")
            self.w = pacsv.CSVWriter(path, csv_ready(schema.empty_table()).schema, write_options=opts)
        elif fmt == "jsonl.gz":
            import gzip

            self.f = gzip.open(path, "wt", encoding="utf-8")
        else:
            self.f = open(path, "w", encoding="utf-8")
            if fmt == "json":
                self.f.write("[")

    def write_table(self, t: pa.Table) -> None:
        if self.fmt == "parquet":
            self.w.write_table(t)
        elif self.fmt in ("csv", "tsv"):
            self.w.write_table(csv_ready(t))
        else:
            for rec in t.to_pylist():
                try:
                    line = json.dumps(rec, ensure_ascii=False, default=str, allow_nan=False)
                except ValueError:  # NaN / ±inf (a kept float column): JSON has none, as pandas' to_json null
                    line = json.dumps(_finite(rec), ensure_ascii=False, default=str)
                if self.fmt == "json":  # one row per line inside the array: still readable with head/grep
                    self.f.write(("," if self.n else "") + "\n" + line)
                else:
                    self.f.write(line + "\n")
                self.n += 1

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.fmt == "json":
            self.f.write("\n]\n")
        (self.w if self.fmt in ("parquet", "csv", "tsv") else self.f).close()


def records_table(
    records: list[dict[str, Any]], keep: tuple[str, ...] = (), schema: pa.Schema | None = None
) -> pa.Table:
    """Output records → an Arrow table: the readout's columns (`schema`, default the default readout's
    columns), then the kept columns with the type Arrow infers (mixed types, as a JSONL column may
    hold, become their JSON text)."""
    if schema is None:  # the default readout's columns
        from ...readouts import default_readout

        schema = default_readout().schema
    cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in schema}
    for k in keep:
        vals = [r[k] for r in records]
        try:
            cols[k] = pa.array(vals)
        # mixed types in a JSONL column: keep their JSON text; a Python object Arrow and JSON do not know (a
        # pandas object column's complex, set or own class: a traceback, issue 34.17) as its str()
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            cols[k] = pa.array([_json_text(v) for v in vals])
    return pa.table(cols)


def _json_text(v: Any) -> str | None:
    """A kept value of a column with no common type: a string as it is, else its JSON text, else its str()."""
    if v is None or isinstance(v, str):
        return v
    try:
        return json.dumps(v)
    except (TypeError, ValueError):  # not JSON (a complex, a set, an object), or a list that holds itself
        return str(v)
