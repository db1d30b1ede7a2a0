"""The JSON-text writers: JSONL (one object per output row; `jsonl.gz` gzipped) and JSON (one array of those
objects, one per line inside it: still readable with head/grep). NaN and ±inf are null (JSON has none)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from .base import WRITERS, Writer


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


def json_lines(t: pa.Table):
    """Each row of `t` as one line of JSON text (no newline)."""
    for rec in t.to_pylist():
        try:
            yield json.dumps(rec, ensure_ascii=False, default=str, allow_nan=False)
        except ValueError:  # NaN / ±inf (a kept float column): JSON has none, as pandas' to_json null
            yield json.dumps(_finite(rec), ensure_ascii=False, default=str)


@WRITERS.register("jsonl")
class JsonlWriter(Writer):
    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[bytes, bytes] | None = None):
        self.f = self.open(path)

    def open(self, path: Path):
        return open(path, "w", encoding="utf-8")

    def write_table(self, t: pa.Table) -> None:
        for line in json_lines(t):
            self.f.write(line + "\n")

    def close(self) -> None:
        self.f.close()


@WRITERS.register("jsonl.gz")
class JsonlGzWriter(JsonlWriter):
    def open(self, path: Path):
        import gzip

        return gzip.open(path, "wt", encoding="utf-8")


@WRITERS.register("json")
class JsonWriter(JsonlWriter):
    def __init__(self, path: Path, schema: pa.Schema, metadata: dict[bytes, bytes] | None = None):
        super().__init__(path, schema, metadata)
        self.n = 0
        self.f.write("[")

    def write_table(self, t: pa.Table) -> None:
        for line in json_lines(t):
            self.f.write(("," if self.n else "") + "\n" + line)
            self.n += 1

    def close(self) -> None:
        self.f.write("\n]\n")
        self.f.close()
