"""Write: each input chunk's records to a crash-safe part under `<out>.partial/` with the job's manifest (the
`--resume` key), then the parts joined into the output (Parquet, JSONL, JSONL.gz, JSON, CSV or TSV: one
writer per format, writers/), atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...core import ANSWER_KEY
from ...readouts import default_readout
from .writers import WRITERS, Writer


def TableWriter(
    path: Path, schema: pa.Schema, fmt: str, metadata: dict[bytes, bytes] | None = None
) -> Writer:
    """The writer of output format `fmt` (options.output_format) over `path`: tables of one `schema` in, a
    context manager that closes the file. Used by the store's join (join.py) for the joined output;
    `metadata` goes into a Parquet file's key-value metadata (the text formats have none: their manifest
    is a sidecar, manifest.py)."""
    return WRITERS[fmt](path, schema, metadata)


def job_schema(schema: pa.Schema) -> pa.Schema:
    """An output's columns: the readout's (`schema`), then each record's answer key (pipeline/reuse.py),
    before the kept columns."""
    return schema.append(pa.field(ANSWER_KEY, pa.string()))


def records_table(
    records: list[dict[str, Any]], keep: tuple[str, ...] = (), schema: pa.Schema | None = None
) -> pa.Table:
    """Output records → an Arrow table: the readout's columns (`schema`, default the default readout's
    columns), then the kept columns with the type Arrow infers (mixed types, as a JSONL column may
    hold, become their JSON text)."""
    if schema is None:  # the default readout's columns
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
