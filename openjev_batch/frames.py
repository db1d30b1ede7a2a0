"""The Python API's data: polars / pandas DataFrames, pyarrow Tables or iterables of dicts → chunks of
(position, record) as the file readers give them (pipeline/formats.py), and an output table back into the
kind asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def kind_of(data: Any) -> str:
    mod = type(data).__module__.split(".")[0]
    if mod == "polars" and type(data).__name__ == "DataFrame":
        return "polars"
    if mod == "pandas" and type(data).__name__ == "DataFrame":
        return "pandas"
    if mod == "pyarrow" and type(data).__name__ == "Table":
        return "arrow"
    return "records"


def columns_of(data: Any, kind: str) -> list[str] | None:
    if kind == "pandas":
        return [str(c) for c in data.columns]
    if kind in ("polars", "arrow"):
        return list(data.column_names if kind == "arrow" else data.columns)
    if isinstance(data, (list, tuple)):  # as the CLI scans JSONL: the keys of the first rows (a generator
        from .pipeline.read import KEEP_SCAN_ROWS  # cannot be read twice, so it is not checked)

        seen: dict[str, None] = {}
        for r in data[:KEEP_SCAN_ROWS]:
            if isinstance(r, dict):
                seen.update(dict.fromkeys(str(k) for k in r))
        return list(seen)
    return None


def records_of(data: Any, kind: str, chunk_rows: int) -> Iterator[list[tuple[int, Any]]]:
    """Chunks of (position, record dict) with plain Python values (through Arrow for DataFrames, as the
    Parquet reader gives them: numpy scalars and pandas NaN would otherwise reach the row checks)."""
    import pyarrow as pa

    from .pipeline.formats import _batch_records as batch_records

    if kind == "polars":
        data = data.to_arrow()
    elif kind == "pandas":
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        # a mixed object column (str and list states); a string with a lone surrogate (UTF-8 cannot hold
        # it): as plain records, whose row checks name the row and field
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            data = [{str(k): _py(v) for k, v in rec.items()} for rec in data.to_dict("records")]
            kind = "records"
    if kind in ("polars", "pandas", "arrow"):
        pos = 0
        for batch in data.to_batches(max_chunksize=chunk_rows):
            recs = batch_records(batch)  # a cell that is not UTF-8 (a Table read from Parquet): a row error
            yield list(enumerate(recs, pos))
            pos += len(recs)
        return
    chunk: list[tuple[int, Any]] = []
    for pos, rec in enumerate(data):
        chunk.append(
            (pos, rec if isinstance(rec, dict) else f"item {pos}: expected a dict, got {type(rec).__name__}")
        )
        if len(chunk) >= chunk_rows:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _py(v: Any) -> Any:
    """A pandas cell as a plain Python value: numpy scalars → Python, NaN → None."""
    if hasattr(v, "item") and type(v).__module__ == "numpy":
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


def convert(table: Any, output: str):
    """The output table as `output`: arrow | pandas | polars."""
    if output == "arrow":
        return table
    if output == "pandas":
        return table.to_pandas()
    import polars as pl

    return pl.from_arrow(table)
