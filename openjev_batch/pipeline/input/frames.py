"""The Python API's data: polars / pandas DataFrames, pyarrow Tables or iterables of dicts → chunks of
(position, record) as the file readers give them (pipeline/input/formats/), and an output table back into the
kind asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...values import kind_of as value_kind


def kind_of(data: Any) -> str:
    mod = type(data).__module__.split(".")[0]
    if mod == "polars" and type(data).__name__ == "DataFrame":
        return "polars"
    if mod == "pandas" and type(data).__name__ == "DataFrame":
        return "pandas"
    if mod == "pyarrow" and type(data).__name__ == "Table":
        return "arrow"
    return "records"


def as_frame(data: Any, text_column: str) -> Any:
    """A pandas Series (its index kept), a polars Series, a list of strings or a 1-D numpy array of them as
    the texts of `text_column` (`state`, or a classifier's `text`); anything else as it is."""
    if type(data).__module__.split(".")[0] in ("pandas", "polars") and type(data).__name__ == "Series":
        return data.to_frame(text_column)
    if type(data).__module__ == "numpy" and type(data).__name__ == "ndarray" and data.ndim == 1:
        data = (
            data.tolist()
        )  # np.array(texts): iterated, each text became an error cell (issue 25's leftover)
    if isinstance(data, list | tuple) and data and all(isinstance(x, str) for x in data):
        return [{text_column: x} for x in data]
    return data


def restore_ids(table: Any, data: Any, kind: str) -> Any:
    """The output's `id` column with the input's integer or float type, where the input's `id` column is one: each
    id was read as its digits (schema.row_id), so the digits are turned back (a row without a usable id
    stays null). Other ids stay strings, as the CLI writes them."""
    import pyarrow as pa

    if kind == "records" or "id" not in (columns_of(data, kind) or ()):
        return table
    if kind == "pandas":
        try:
            typ = pa.Array.from_pandas(data["id"]).type
        # mixed types; a string with a lone surrogate (issue 34.17: a traceback): not a numeric column
        except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            return table
    else:
        typ = (data.column("id") if kind == "arrow" else data["id"].to_arrow()).type
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return table
    # a float id column holds integral floats (1.0 counts as 1; 1.5 is a row error, its id null): back to floats
    back = float if pa.types.is_floating(typ) else int
    ids = [
        None if s is None or (n := _int_or_none(s)) is None else back(n)
        for s in table.column("id").to_pylist()
    ]
    i = table.schema.get_field_index("id")
    return table.set_column(i, pa.field("id", typ), pa.array(ids, typ))


def _int_or_none(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        return None


def input_index(positions: list[int], data: Any, kind: str) -> Any:
    """For a pandas input: each output row's input index label (`positions`: each output row's input row
    position, source.FrameSource.positions), so the output joins back to the input by index, whatever
    its ids (null, repeated, or none). None for other inputs."""
    if kind != "pandas":
        return None
    return data.index.take(positions)


def columns_of(data: Any, kind: str) -> list[str] | None:
    if kind == "pandas":
        return [str(c) for c in data.columns]
    if kind in ("polars", "arrow"):
        return list(data.column_names if kind == "arrow" else data.columns)
    if isinstance(data, (list, tuple)):  # as the CLI scans JSONL: the keys of the first rows (a generator
        # cannot be read twice, so it is not checked)
        from .read import KEEP_SCAN_ROWS  # lazy: pyarrow (frames.py loads it only when used)

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

    from .formats.arrow_records import batch_records  # lazy: pyarrow (frames.py loads it only when used)

    if kind == "polars":
        data = data.to_arrow()
    elif kind == "pandas":
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        # a mixed object column (str and list states); a string with a lone surrogate (UTF-8 cannot hold
        # it); a type Arrow lacks (complex): as plain records, whose row checks name the row and field
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeEncodeError):
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
            (pos, rec if isinstance(rec, dict) else f"item {pos}: expected a dict, got {value_kind(rec)}")
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


def convert(table: Any, output: str, index: Any = None):
    """The output table as `output`: arrow | pandas (with `index`, when given) | polars."""
    if output == "arrow":
        return table
    if output == "pandas":
        df = table.to_pandas()
        if index is not None:
            df.index = index
        return df
    import polars as pl

    return pl.from_arrow(table)
