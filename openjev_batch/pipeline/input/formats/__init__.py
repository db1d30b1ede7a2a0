"""Input formats, one reader per format (datatrove's readers/): which format a path holds (by extension, or
a `datasets` folder's files), and the one entry point that reads any of them as chunks of (position,
record or the error text of an unreadable line), `record_chunks`, with the few questions a job asks of an
input before reading it (`has_rows`, `count_rows`, `kept_types`, `input_columns`). Each is one lookup in
`READERS` (base.py), never a test of the format's name.

The readers: JSONL (jsonl.py), JSON (json_array.py), CSV and TSV (delimited.py), Parquet (parquet.py), a
datasets folder (hf_dataset.py); the record parsing they stand on: json_records.py, csv_records.py,
arrow_records.py. "Add an input format" is one file there with a `@register(name)` Reader, imported below.
This folder imports only the floors under the readouts (errors, values, registry): a readout may ask an
input's columns (docs/structure.md).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from ....errors import InputFileError
from . import delimited, hf_dataset, json_array, jsonl, parquet  # noqa: F401 - each registers its reader
from .base import READERS, Reader, open_binary

__all__ = ["READERS", "Reader", "count_rows", "has_rows", "input_columns", "input_format", "kept_types",
           "may_have_images", "open_binary", "record_chunks", "refuse_repeated_columns"]  # fmt: skip

INPUT_EXT = {ext: name for name, cls in READERS.items() for ext in cls.extensions}
FORMAT_NAMES = {name: cls.title for name, cls in READERS.items()}
COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def _folder_format(path: Path) -> str:
    """The format of a folder: the reader that claims it (a datasets folder; a DatasetDict folder is
    refused there, naming its splits); InputFileError for any other folder."""
    for name, cls in READERS.items():
        if cls().claims_folder(path):
            return name
    raise InputFileError(f"{path}: a folder, but not one written by datasets' save_to_disk (no state.json)")


def input_format(path: str | Path) -> tuple[str, str | None]:
    """(format, compression) of an input path: format is parquet | jsonl | csv | json | hf-dataset (a
    `datasets` folder written by `save_to_disk`); compression is gzip | zstd | None (from a `.gz` / `.zst`
    ending, for jsonl, csv and json). Raises InputFileError for anything else."""
    path = Path(path)
    if path.is_dir():
        return _folder_format(path), None
    suffixes = [x.lower() for x in path.suffixes[-2:]]
    compression = COMPRESSION.get(suffixes[-1]) if suffixes else None
    ext = (suffixes[-2] if len(suffixes) == 2 else "") if compression else (suffixes[-1] if suffixes else "")
    fmt = INPUT_EXT.get(ext)
    if fmt is None or (compression and not READERS[fmt].compressible):
        raise InputFileError(
            f"{path}: unknown extension {''.join(path.suffixes[-2:]) or '(none)'!r}; use .parquet, .jsonl "
            "(or .jsonl.gz / .jsonl.zst), .csv, .tsv, .json, a datasets folder, or - for stdin"
        )
    return fmt, compression


def _reader(path: Path) -> tuple[Reader, str | None]:
    fmt, compression = input_format(path)
    return READERS[fmt](), compression


@contextlib.contextmanager
def _reading(path: Path, reader: Reader, failures: type[BaseException] | tuple = Exception):
    """A reader's `failures` as one InputFileError naming the file and its format (ours pass through)."""
    try:
        yield
    except InputFileError:
        raise
    except failures as e:
        raise InputFileError(f"{path}: cannot read as {reader.title}: {e}") from e


def input_columns(path: Path) -> set[str] | None:
    """Column names of a schema-carrying input (Parquet, CSV header, datasets folder), else None."""
    reader, compression = _reader(path)
    with _reading(path, reader):
        return reader.columns(path, compression)


def may_have_images(path: str | Path) -> bool:
    """Whether any row of the input may carry an image (the reader's `may_have_images`: a column, a nested
    field or a JSON key naming one), read before the engine starts; never False for a row that has one."""
    path = Path(path)
    reader, compression = _reader(path)
    with _reading(path, reader, reader.failures):
        return reader.may_have_images(path, compression)


def refuse_repeated_columns(path: Path) -> None:
    """Raise InputFileError when a Parquet file's or datasets folder's schema names a column twice
    (`id, state, state`): each record's dict kept the last one, silently (the hostile trial). A CSV
    header is checked as it is read (csv_records.header); JSONL refuses a repeated key per row."""
    reader, _ = _reader(path)
    with _reading(path, reader):
        schemas = reader.schemas(path)
    for where, names in schemas:
        if dup := sorted(n for n, k in Counter(names).items() if k > 1):  # one count: 100,000 columns
            raise InputFileError(
                f"{where}: the {reader.schema_title} schema names column(s) "
                f"{', '.join(map(repr, dup))} twice (which one to read is not known): rename or drop one"
            )


def record_chunks(
    path: Path, chunk_rows: int, hasher=None
) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Chunks of (position, record) or (position, error text for an unreadable line).

    `hasher` (a hashlib object), when given, is fed the input's content as it is read, before each chunk is
    yielded, so `hasher.hexdigest()` then identifies the input up to the end of that chunk (resume by
    content, ledger.py): JSONL, JSON and CSV their raw (decompressed) bytes; Parquet and datasets folders
    their Arrow schema and record batches in Arrow IPC form. A reader's `failures` (a corrupt or
    truncated .gz/.zst stream, a read error; any error of an Arrow reader) become InputFileError."""
    reader, compression = _reader(path)
    with _reading(path, reader, reader.failures):
        yield from reader.chunks(path, compression, chunk_rows, hasher)


def has_rows(path: Path) -> bool:
    """Whether the input holds at least one row (blank lines, a header only or 0 rows do not count)."""
    reader, compression = _reader(path)
    with _reading(path, reader):
        return reader.has_rows(path, compression)


def kept_types(path: str | Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
    """The Arrow types of the `--keep` columns from a schema-carrying input (Parquet, datasets folder; CSV
    columns are read as text), so the output's kept columns have the input's types whatever the chunking;
    None for JSONL and JSON, which have no schema (the store then unifies the values' types)."""
    path = Path(path)
    reader, _ = _reader(path)
    return reader.kept_types(path, keep)


def count_rows(path: str | Path, limit: int | None = None) -> int | None:
    """The input's rows, counted before a job for its progress total (Parquet and `datasets` metadata, JSONL
    non-blank lines, CSV records), at most `limit`; None for JSON (read whole anyway) or when counting
    fails (progress then has no total; the reader reports the real problem)."""
    path = Path(path)
    try:
        reader, compression = _reader(path)
        n = reader.count(path, compression)
    except Exception:  # noqa: BLE001 - a progress total is optional
        return None
    if n is None:
        return None
    return n if limit is None else min(n, limit)
