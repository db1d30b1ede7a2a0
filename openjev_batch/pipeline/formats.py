"""Input formats: Parquet, JSONL (also .gz/.zst), CSV, JSON, `datasets` folders and stdin, read as chunks of
(position, record or the error text of an unreadable line).

Size (over the house's ~300 lines): one short reader per format behind one entry point (`record_chunks`),
plus the few questions the job asks of an input before reading it (`has_rows`, `count_rows`, `kept_types`,
`input_columns`); "add an input format" is this file alone.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputFileError
from ..values import MAX_LINE_BYTES, InvalidText, no_duplicate_keys
from .csv_records import columns as csv_columns
from .csv_records import count as csv_count
from .csv_records import record_chunks as csv_chunks

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


def input_format(path: str | Path) -> tuple[str, str | None]:
    """(format, compression) of an input path: format is parquet | jsonl | csv | json | hf-dataset (a
    `datasets` folder written by `save_to_disk`); compression is gzip | zstd | None (from a `.gz` / `.zst`
    ending, for jsonl, csv and json). Raises InputFileError for anything else."""
    path = Path(path)
    if path.is_dir():
        if (path / "state.json").is_file():
            return "hf-dataset", None
        if (path / "dataset_dict.json").is_file():
            splits = _json_file(path / "dataset_dict.json")
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
        raise InputFileError(
            f"{path}: a folder, but not one written by datasets' save_to_disk (no state.json)"
        )
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


def _jsonl_records(f, chunk_rows: int, hasher=None) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Reads each line with a bounded readline: a line over MAX_LINE_BYTES is that row's error, skipped
    unread in pieces (a 300 MB line in a small .gz peaked at 2.1 GB RSS, read and decoded whole)."""
    chunk: list[tuple[int, dict[str, Any] | str]] = []
    pos = lineno = 0
    with f:
        while raw := f.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if hasher is not None:
                hasher.update(raw)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while piece := f.readline(1 << 20):
                    if hasher is not None:
                        hasher.update(piece)
                    if piece.endswith(b"\n"):
                        break
                chunk.append(
                    (pos, f"line {lineno}: over {MAX_LINE_BYTES:,} bytes in one row (the limit), not read")
                )
                pos += 1
                if len(chunk) >= chunk_rows:
                    yield chunk
                    chunk = []
                continue
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Windows editors)
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicate_keys)
                if not isinstance(rec, dict):
                    raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
                chunk.append((pos, rec))
            except UnicodeDecodeError as e:
                chunk.append((pos, f"line {lineno}: not valid UTF-8 (byte {e.start})"))
            except json.JSONDecodeError as e:
                chunk.append((pos, f"line {lineno}: malformed JSON ({e})"))
            except RecursionError:  # json's C decoder recurses once per level
                chunk.append((pos, f"line {lineno}: JSON nested too deeply"))
            except ValueError as e:
                chunk.append((pos, f"line {lineno}: {e}"))
            pos += 1
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _count_lines(f) -> int:
    """Non-blank lines, read in bounded pieces (a line is never held whole)."""
    n, blank = 0, True
    with f:
        while piece := f.readline(1 << 20):
            blank = blank and not piece.strip()
            if piece.endswith(b"\n"):
                n, blank = n + (not blank), True
    return n + (not blank)


def _json_records(path: Path, compression: str | None, chunk_rows: int, hasher=None):
    """A .json file: one JSON array of row objects (read whole; JSON has no record boundaries)."""
    with open_binary(path, compression) as f:
        raw = f.read()
    if hasher is not None:
        hasher.update(raw)
    try:
        data = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=no_duplicate_keys)
    except RecursionError:
        raise InputFileError(f"{path}: cannot read as JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InputFileError(
            f"{path}: cannot read as JSON: {e} (one object per line? name it .jsonl)"
        ) from None
    if not isinstance(data, list):
        raise InputFileError(
            f"{path}: expected a JSON array of row objects, got {type(data).__name__} "
            "(one object per line? name it .jsonl)"
        )
    for start in range(0, len(data), chunk_rows):
        yield [
            (
                pos,
                rec
                if isinstance(rec, dict)
                else f"item {pos}: expected a JSON object, got {type(rec).__name__}",
            )
            for pos, rec in enumerate(data[start : start + chunk_rows], start)
        ]


META_BYTES = 1 << 20  # a datasets folder's state.json / dataset_dict.json (a few hundred bytes as written)


def read_at_most(path: str | Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`: more than `limit` means the file is over it, which the caller
    reports in its own terms. Every small file is read this way: `-q /dev/zero` was read to its end before
    any size check (issue 25)."""
    with open(path, "rb") as f:
        return f.read(limit + 1)


def _json_file(path: Path) -> Any:
    """A datasets folder's metadata file as JSON. Raises InputFileError naming it."""
    raw = read_at_most(path, META_BYTES)
    if len(raw) > META_BYTES:
        raise InputFileError(f"{path}: over {META_BYTES:,} bytes; not a datasets metadata file")
    try:
        return json.loads(raw.decode("utf-8-sig"), object_pairs_hook=no_duplicate_keys)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputFileError(f"{path}: not valid JSON ({e})") from None


def _hf_dataset_files(path: Path) -> list[Path]:
    """The Arrow files a `datasets` folder's state.json lists. Each must be a file name inside the folder:
    the folder may come from anyone, and `../other/data.arrow` or an absolute path was read as named."""
    state = _json_file(path / "state.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("filename"), str) for e in entries
    ):
        raise InputFileError(f'{path}/state.json: expected `_data_files`, a list of {{"filename": ...}}')
    root = path.resolve()
    files = []
    for e in entries:
        name = e["filename"]
        p = path / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not p.resolve().is_relative_to(root):
            raise InputFileError(f"{path}/state.json: data file {name!r} is outside the folder")
        files.append(p)
    return files


def _arrow_schema(p: Path) -> pa.Schema:
    with pa.memory_map(str(p)) as src:
        try:
            return pa.ipc.open_stream(src).schema
        except pa.ArrowInvalid:
            return pa.ipc.open_file(src).schema


def _arrow_batches(files: list[Path]) -> Iterator[pa.RecordBatch]:
    """Record batches of a `datasets` folder's Arrow files (the IPC stream format `save_to_disk` writes;
    the file format is accepted too). Read with pyarrow, so `datasets` need not be installed."""
    for p in files:
        with pa.memory_map(str(p)) as src:
            try:
                reader = pa.ipc.open_stream(src)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
                continue
            yield from reader


def _rechunk(batches, chunk_rows: int, hasher=None) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    pos, buf = 0, []
    schema = None
    for b in batches:
        if hasher is not None:
            if b.schema != schema:
                schema = b.schema
                hasher.update(schema.serialize())
            hasher.update(b.serialize())
        buf.extend(_batch_records(b))
        while len(buf) >= chunk_rows:
            yield list(enumerate(buf[:chunk_rows], pos))
            pos += chunk_rows
            buf = buf[chunk_rows:]
    if buf:
        yield list(enumerate(buf, pos))


def input_columns(path: Path) -> set[str] | None:
    """Column names of a schema-carrying input (Parquet, CSV header, datasets folder), else None."""
    fmt, compression = input_format(path)
    try:
        if fmt == "parquet":
            return set(pq.read_schema(path).names)
        if fmt == "csv":
            return set(csv_columns(open_binary(path, compression), str(path), _delim(path)))
        if fmt == "hf-dataset":
            files = _hf_dataset_files(path)
            return set(_arrow_schema(files[0]).names) if files else set()
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    return None


def record_chunks(
    path: Path, chunk_rows: int, hasher=None
) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Chunks of (position, record) or (position, error text for an unreadable line).

    `hasher` (a hashlib object), when given, is fed the input's content as it is read, before each chunk is
    yielded, so `hasher.hexdigest()` then identifies the input up to the end of that chunk (resume by
    content, store.py): JSONL, JSON and CSV their raw (decompressed) bytes; Parquet and datasets folders
    their Arrow schema and record batches in Arrow IPC form."""
    fmt, compression = input_format(path)
    try:
        if fmt == "jsonl":
            yield from _jsonl_records(open_binary(path, compression), chunk_rows, hasher)
            return
        if fmt == "json":
            yield from _json_records(path, compression, chunk_rows, hasher)
            return
        if fmt == "csv":
            yield from csv_chunks(open_binary(path, compression), str(path), chunk_rows, hasher, _delim(path))
            return
    except OSError as e:  # a corrupt or truncated .gz/.zst stream (pyarrow's codec), or a read error
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    try:
        if fmt == "hf-dataset":
            batches = _arrow_batches(_hf_dataset_files(path))
        else:
            batches = pq.ParquetFile(path).iter_batches(batch_size=chunk_rows)
        yield from _rechunk(batches, chunk_rows, hasher)
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e


def _batch_records(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """A record batch (Parquet, CSV, datasets) as row dicts. Arrow does not validate UTF-8 on read: a cell that does not decode
    becomes an `InvalidText`, which `parse_row` reports as that row's error naming the column."""
    try:
        return batch.to_pylist()
    except UnicodeDecodeError:
        pass
    cols: dict[str, list[Any]] = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        try:
            cols[name] = col.to_pylist()
        except UnicodeDecodeError:
            vals: list[Any] = []
            for i in range(len(col)):
                try:
                    vals.append(col[i].as_py())
                except UnicodeDecodeError as e:
                    vals.append(InvalidText(f"not valid UTF-8 (byte {e.object[e.start]:#04x} at {e.start})"))
            cols[name] = vals
    return [dict(zip(cols, vs, strict=True)) for vs in zip(*cols.values(), strict=True)]


def spool_stdin(folder: str | Path, stream=None) -> Path:
    """Copy standard input (`-`) into `folder` under a name whose extension is its sniffed format
    (Parquet magic → .parquet, `[` → .json, `{` → .jsonl, anything else → .csv; a UTF-8 byte-order mark
    skipped; gzip / zstd magic → the same, of the decompressed head, with .gz / .zst), so every reader works
    on it unchanged. Returns the path. Raises InputFileError for empty input; OSError when `folder` cannot
    take the copy."""
    import sys

    src = stream if stream is not None else sys.stdin.buffer
    tmp = Path(folder) / "stdin.tmp"
    with open(tmp, "wb") as f:
        shutil.copyfileobj(src, f, 1 << 20)
    with open(tmp, "rb") as f:
        head = f.read(4096)
    magic = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}
    compression = next((c for m, c in magic.items() if head.startswith(m)), None)
    if compression is not None:  # gzip on stdin was parsed as CSV (issue 25)
        try:
            with pa.input_stream(str(tmp), compression=compression) as z:
                head = z.read(4096)
        except (OSError, pa.ArrowException) as e:
            raise InputFileError(
                f"-: standard input starts like {compression} but does not decompress: {e}"
            ) from None
    head = head.removeprefix(b"\xef\xbb\xbf")  # a BOM was sniffed as CSV (issue 25)
    if not head.strip():
        raise InputFileError("-: standard input is empty")
    if head[:4] == b"PAR1":
        if compression:
            raise InputFileError(f"-: a {compression}-compressed Parquet file; pipe it decompressed")
        return tmp.rename(tmp.with_name("stdin.parquet"))
    ext = {b"[": ".json", b"{": ".jsonl"}.get(head.lstrip()[:1], ".csv")
    return tmp.rename(tmp.with_name("stdin" + ext + {"gzip": ".gz", "zstd": ".zst", None: ""}[compression]))


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
    None for JSONL and JSON, which have no schema (store.py then unifies the values' types)."""
    path = Path(path)
    fmt, _ = input_format(path)
    if fmt == "parquet":
        schema = pq.read_schema(path)
    elif fmt == "csv":
        return dict.fromkeys(keep, pa.string())
    elif fmt == "hf-dataset":
        return _hf_kept_types(path, keep)
    else:
        return None
    return {k: schema.field(k).type for k in keep}


def _hf_kept_types(path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType]:
    """The `--keep` columns' types over every Arrow file of a datasets folder: one file's column may be
    null-typed (all its values null) or int where another's is float, so the types are unified (the write
    failed with ArrowInvalid on a later file's values); types that do not unify are a job error."""
    try:
        schemas = [_arrow_schema(p) for p in _hf_dataset_files(path)]
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES['hf-dataset']}: {e}") from e
    types: dict[str, pa.DataType] = {}
    for k in keep:
        fields = [s.field(k) for s in schemas if k in s.names]
        if not fields:
            types[k] = pa.null()
            continue
        try:
            unified = pa.unify_schemas([pa.schema([f]) for f in fields], promote_options="permissive")
            types[k] = unified.field(k).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            kinds = ", ".join(sorted({str(f.type) for f in fields}))
            raise InputFileError(
                f"{path}: --keep column {k!r} has different types in the folder's Arrow files ({kinds})"
            ) from None
    return types


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
            n = sum(b.num_rows for b in _arrow_batches(_hf_dataset_files(path)))
        elif fmt == "jsonl":
            n = _count_lines(open_binary(path, compression))
        elif fmt == "csv":
            n = csv_count(open_binary(path, compression), str(path), _delim(path))
        else:
            return None
    except Exception:  # noqa: BLE001 - a progress total is optional
        return None
    return n if limit is None else min(n, limit)
