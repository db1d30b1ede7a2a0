"""Input formats: which format a path holds (by extension, or a `datasets` folder's files), and the one entry
point that reads any of them as chunks of (position, record or the error text of an unreadable line),
`record_chunks`, with the few questions a job asks of an input before reading it (`has_rows`,
`count_rows`, `kept_types`, `input_columns`).

The readers, one per format family: JSONL and JSON (json_records.py), CSV and TSV (csv_records.py), Parquet
and datasets folders (arrow_records.py); standard input is spooled to a file first (stdin.py). "Add an input
format" is a reader there and its extension here.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InputFileError
from .arrow_records import arrow_batches, arrow_schema, hf_dataset_files, hf_kept_types, json_file, rechunk
from .csv_records import columns as csv_columns
from .csv_records import count as csv_count
from .csv_records import record_chunks as csv_chunks
from .json_records import count_lines, json_records, jsonl_records

JSONL_EXT = (".jsonl", ".ndjson")
PARQUET_EXT = (".parquet", ".pq")
INPUT_EXT = {
    **dict.fromkeys(JSONL_EXT, "jsonl"),
    **dict.fromkeys(PARQUET_EXT, "parquet"),
    ".csv": "csv",
    ".tsv": "csv",  # the CSV reader with a tab for the comma (_delim)
    ".json": "json",
}
FORMAT_NAMES = {
    "parquet": "Parquet",
    "jsonl": "JSONL",
    "csv": "CSV",
    "json": "JSON",
    "hf-dataset": "a datasets folder",
}
COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def _delim(path: str | Path) -> str:
    """A CSV-family input's delimiter: a tab for .tsv (also .tsv.gz / .tsv.zst), else a comma."""
    return "\t" if ".tsv" in [x.lower() for x in Path(path).suffixes[-2:]] else ","


def _folder_format(path: Path) -> str:
    """The format of a folder: "hf-dataset" when datasets' save_to_disk wrote it; InputFileError for any
    other folder, naming the splits of a DatasetDict folder."""
    if (path / "state.json").is_file():
        return "hf-dataset"
    if (path / "dataset_dict.json").is_file():
        splits = json_file(path / "dataset_dict.json")
        splits = splits.get("splits") if isinstance(splits, dict) else None
        if isinstance(splits, list) and splits and all(isinstance(s, str) for s in splits):
            raise InputFileError(
                f"{path}: a datasets DatasetDict folder; pass one split's folder, e.g. "
                + ", ".join(str(path / s) for s in splits[:3])
            )
        raise InputFileError(
            f"{path}: a datasets DatasetDict folder, but its dataset_dict.json lists no splits; pass "
            "one split's folder (the one with a state.json)"
        )
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
    if fmt is None or (compression and fmt == "parquet"):
        raise InputFileError(
            f"{path}: unknown extension {''.join(path.suffixes[-2:]) or '(none)'!r}; use .parquet, .jsonl "
            "(or .jsonl.gz / .jsonl.zst), .csv, .tsv, .json, a datasets folder, or - for stdin"
        )
    return fmt, compression


class _RawStream(io.RawIOBase):
    """A pyarrow input stream as a Python raw stream, so io.BufferedReader can split it into lines
    (pyarrow's own readline does not work on decompressing streams)."""

    def __init__(self, f):
        self.f = f

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.f.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.f.close()
        super().close()


def open_binary(path: Path, compression: str | None):
    """A buffered binary file object over `path`, decompressing gzip/zstd on the fly (pyarrow's codecs)."""
    if compression is None:
        return open(path, "rb")
    return io.BufferedReader(_RawStream(pa.input_stream(path, compression=compression)), 1 << 20)


def input_columns(path: Path) -> set[str] | None:
    """Column names of a schema-carrying input (Parquet, CSV header, datasets folder), else None."""
    fmt, compression = input_format(path)
    try:
        if fmt == "parquet":
            return set(pq.read_schema(path).names)
        if fmt == "csv":
            return set(csv_columns(open_binary(path, compression), str(path), _delim(path)))
        if fmt == "hf-dataset":
            files = hf_dataset_files(path)
            return set(arrow_schema(files[0]).names) if files else set()
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    return None


def refuse_repeated_columns(path: Path) -> None:
    """Raise InputFileError when a Parquet file's or datasets folder's schema names a column twice
    (`id, state, state`): each record's dict kept the last one, silently (the hostile trial). A CSV
    header is checked as it is read (csv_records.header); JSONL refuses a repeated key per row."""
    fmt, _ = input_format(path)
    try:
        if fmt == "parquet":
            schemas = [(path, pq.read_schema(path).names)]
        elif fmt == "hf-dataset":
            schemas = [(f, arrow_schema(f).names) for f in hf_dataset_files(path)]
        else:
            return
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    for where, names in schemas:
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise InputFileError(
                f"{where}: the {FORMAT_NAMES[fmt] if fmt == 'parquet' else 'Arrow'} schema names column(s) "
                f"{', '.join(map(repr, dup))} twice (which one to read is not known): rename or drop one"
            )


def record_chunks(
    path: Path, chunk_rows: int, hasher=None
) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Chunks of (position, record) or (position, error text for an unreadable line).

    `hasher` (a hashlib object), when given, is fed the input's content as it is read, before each chunk is
    yielded, so `hasher.hexdigest()` then identifies the input up to the end of that chunk (resume by
    content, ledger.py): JSONL, JSON and CSV their raw (decompressed) bytes; Parquet and datasets folders
    their Arrow schema and record batches in Arrow IPC form."""
    fmt, compression = input_format(path)
    try:
        if fmt == "jsonl":
            yield from jsonl_records(open_binary(path, compression), chunk_rows, hasher)
            return
        if fmt == "json":
            yield from json_records(open_binary(path, compression), str(path), chunk_rows, hasher)
            return
        if fmt == "csv":
            yield from csv_chunks(open_binary(path, compression), str(path), chunk_rows, hasher, _delim(path))
            return
    except OSError as e:  # a corrupt or truncated .gz/.zst stream (pyarrow's codec), or a read error
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    try:
        if fmt == "hf-dataset":
            batches = arrow_batches(hf_dataset_files(path))
        else:
            batches = pq.ParquetFile(path).iter_batches(batch_size=chunk_rows)
        yield from rechunk(batches, chunk_rows, hasher)
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e


def has_rows(path: Path) -> bool:
    """Whether the input holds at least one row (blank lines, a header only or 0 rows do not count)."""
    fmt, compression = input_format(path)
    try:
        if fmt == "parquet":
            return pq.ParquetFile(path).metadata.num_rows > 0
        if fmt == "csv":  # the whole file: a quote never closed fails the job before the model loads
            return csv_count(open_binary(path, compression), str(path), _delim(path)) > 0
        return next(record_chunks(path, 1), None) is not None
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e


def kept_types(path: str | Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
    """The Arrow types of the `--keep` columns from a schema-carrying input (Parquet, datasets folder; CSV
    columns are read as text), so the output's kept columns have the input's types whatever the chunking;
    None for JSONL and JSON, which have no schema (the store then unifies the values' types)."""
    path = Path(path)
    fmt, _ = input_format(path)
    if fmt == "parquet":
        schema = pq.read_schema(path)
        return {k: schema.field(k).type for k in keep}
    if fmt == "csv":
        return dict.fromkeys(keep, pa.string())
    if fmt == "hf-dataset":
        return hf_kept_types(path, keep)
    return None


def count_rows(path: str | Path, limit: int | None = None) -> int | None:
    """The input's rows, counted before a job for its progress total (Parquet and `datasets` metadata, JSONL
    non-blank lines, CSV records), at most `limit`; None for JSON (read whole anyway) or when counting
    fails (progress then has no total; the reader reports the real problem)."""
    path = Path(path)
    try:
        fmt, compression = input_format(path)
        if fmt == "parquet":
            n = pq.ParquetFile(path).metadata.num_rows
        elif fmt == "hf-dataset":
            n = sum(b.num_rows for b in arrow_batches(hf_dataset_files(path)))
        elif fmt == "jsonl":
            n = count_lines(open_binary(path, compression))
        elif fmt == "csv":
            n = csv_count(open_binary(path, compression), str(path), _delim(path))
        else:
            return None
    except Exception:  # noqa: BLE001 - a progress total is optional
        return None
    return n if limit is None else min(n, limit)
