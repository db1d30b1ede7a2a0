"""Read input in bounded chunks (Parquet or JSONL, by extension) and write results to Parquet.

Reading never raises for a bad row: a JSONL line that is not valid UTF-8 / JSON / an object becomes a
`RowError` naming its line. Whole-file problems (missing, wrong extension, unreadable, empty) raise
InputFileError. Writing goes to ``<out>.partial`` and is renamed into place only by `close()`, so the
target path never holds a truncated file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputFileError
from .schema import Row, RowError, parse_row

JSONL_EXT = (".jsonl", ".ndjson")
PARQUET_EXT = (".parquet", ".pq")

OUTPUT_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question_id", pa.string()),
        ("type", pa.string()),
        ("options", pa.list_(pa.string())),
        ("probs", pa.list_(pa.float64())),
        ("answer", pa.string()),
        ("p_true", pa.float64()),
        ("score", pa.float64()),
        ("confidence", pa.float64()),
        ("label_mass", pa.float64()),
        ("prefix_tokens", pa.int64()),
        ("branch_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("error", pa.string()),
    ]
)


def _records(path: Path, chunk_rows: int) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Chunks of (position, record) or (position, error text for an unreadable line)."""
    suffix = path.suffix.lower()
    if suffix in JSONL_EXT:
        chunk: list[tuple[int, dict[str, Any] | str]] = []
        pos = 0
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw.decode("utf-8"))
                    if not isinstance(rec, dict):
                        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
                    chunk.append((pos, rec))
                except UnicodeDecodeError as e:
                    chunk.append((pos, f"line {lineno}: not valid UTF-8 (byte {e.start})"))
                except ValueError as e:  # JSONDecodeError is a ValueError
                    chunk.append((pos, f"line {lineno}: malformed JSON ({e})"))
                pos += 1
                if len(chunk) >= chunk_rows:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk
        return
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as Parquet: {e}") from e
    pos = 0
    for batch in pf.iter_batches(batch_size=chunk_rows):
        recs = batch.to_pylist()
        yield list(enumerate(recs, pos))
        pos += len(recs)


def check_input(path: str | Path, keep: tuple[str, ...] = ()) -> Path:
    """Whole-file checks done before any model loads. Raises InputFileError for a missing, empty or
    wrong-extension file, or a `--keep` column missing from a Parquet schema."""
    path = Path(path)
    if path.suffix.lower() not in JSONL_EXT + PARQUET_EXT:
        raise InputFileError(f"{path}: unknown extension {path.suffix!r}; use .parquet or .jsonl")
    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise InputFileError(f"{path}: file is empty")
    if path.suffix.lower() in PARQUET_EXT and keep:
        try:
            names = set(pq.read_schema(path).names)
        except Exception as e:
            raise InputFileError(f"{path}: cannot read as Parquet: {e}") from e
        if missing := [k for k in keep if k not in names]:
            raise InputFileError(f"{path}: --keep column(s) not in the input: {', '.join(missing)}")
    return path


def read_rows(
    path: str | Path, questions: Any = None, keep: tuple[str, ...] = (), chunk_rows: int = 100_000
) -> Iterator[list[Row | RowError]]:
    """Yield chunks of parsed rows in input order. Duplicate ids become RowErrors (the first one wins).

    Raises InputFileError for a missing, empty or wrong-extension file, or a `--keep` column that
    does not exist (Parquet: checked against the schema up front).
    """
    path = check_input(path, keep)
    seen: dict[str, int] = {}
    any_rows = False
    for chunk in _records(path, chunk_rows):
        out: list[Row | RowError] = []
        for pos, rec in chunk:
            any_rows = True
            if isinstance(rec, str):
                out.append(RowError(pos, str(pos), f"row {pos}: {rec}", questions_ids(questions)))
                continue
            row = parse_row(pos, rec, questions, keep)
            if row.id in seen:
                row = RowError(
                    pos,
                    row.id,
                    f"row {row.id}: id: duplicate id (first at row {seen[row.id]})",
                    getattr(row, "qids", ()) or tuple(q.qid for q in getattr(row, "questions", ())),
                    row.kept,
                )
            else:
                seen[row.id] = pos
            out.append(row)
        yield out
    if not any_rows:
        raise InputFileError(f"{path}: no rows")


def questions_ids(questions: Any) -> tuple[str, ...]:
    return tuple(q.qid for q in questions) if questions else ()


class ResultWriter:
    """Streams result records to ``<path>.partial`` in row groups; `close()` renames it to `path`.

    Kept columns take the Arrow type inferred from the first chunk; a later value that does not fit
    that type is written as its JSON text when the column is a string column, else raises ValueError.
    """

    def __init__(self, path: str | Path, keep: tuple[str, ...] = ()):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.keep = keep
        self.schema: pa.Schema | None = None
        self._writer: pq.ParquetWriter | None = None
        self.rows_written = 0

    def write(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in OUTPUT_SCHEMA}
        if self.schema is None:
            fields = list(OUTPUT_SCHEMA)
            for k in self.keep:
                arr = pa.array([r[k] for r in records])
                fields.append(pa.field(k, pa.string() if pa.types.is_null(arr.type) else arr.type))
            self.schema = pa.schema(fields)
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.partial, self.schema)
        for k in self.keep:
            t = self.schema.field(k).type
            vals = [r[k] for r in records]
            try:
                cols[k] = pa.array(vals, type=t)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                if not pa.types.is_string(t):
                    raise ValueError(f"kept column {k!r} changes type after the first chunk") from None
                cols[k] = pa.array(
                    [v if v is None or isinstance(v, str) else json.dumps(v) for v in vals], type=t
                )
        self._writer.write_table(pa.table(cols, schema=self.schema))
        self.rows_written += len(records)

    def close(self) -> Path:
        """Finish the file and atomically move it to the target path. Returns the path."""
        if self._writer is None:  # nothing written: still produce a valid (empty) file
            self.schema = pa.schema(list(OUTPUT_SCHEMA) + [pa.field(k, pa.string()) for k in self.keep])
            self.partial.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.partial, self.schema)
        self._writer.close()
        os.replace(self.partial, self.path)
        return self.path
