"""Read input in bounded chunks (Parquet, JSONL — also .gz/.zst —, CSV, JSON, a `datasets` folder; by
extension) and write results (Parquet, JSONL or CSV, by extension).

Reading never raises for a bad row: a JSONL line that is not valid UTF-8 / JSON / an object becomes a
`RowError` naming its line. Whole-file problems (missing, wrong extension, unreadable, empty) raise
InputFileError. Writing goes to ``<out>.partial`` and is renamed into place only by `close()`, so the
target path never holds a truncated file.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .config import output_format  # parts are always Parquet; the joined file is written in this format
from .errors import InputFileError
from .readouts.label_logprobs import OUTPUT_SCHEMA
from .schema import InvalidText, duplicate_id_error

JSONL_EXT = (".jsonl", ".ndjson")
KEEP_SCAN_ROWS = 1_000  # JSONL rows read up front to check that each --keep column exists
PARQUET_EXT = (".parquet", ".pq")
INPUT_EXT = {
    **dict.fromkeys(JSONL_EXT, "jsonl"),
    **dict.fromkeys(PARQUET_EXT, "parquet"),
    ".csv": "csv",
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


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: plain json.loads keeps the last of two equal keys silently (two options with
    one name would merge); raise instead, naming the key."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r} in a JSON object")
    return d


def input_format(path: str | Path) -> tuple[str, str | None]:
    """(format, compression) of an input path: format is parquet | jsonl | csv | json | hf-dataset (a
    `datasets` folder written by `save_to_disk`); compression is gzip | zstd | None (from a `.gz` / `.zst`
    ending, for jsonl, csv and json). Raises InputFileError for anything else."""
    path = Path(path)
    if path.is_dir():
        if (path / "state.json").is_file():
            return "hf-dataset", None
        if (path / "dataset_dict.json").is_file():
            splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
            raise InputFileError(
                f"{path}: a datasets DatasetDict folder; pass one split's folder, e.g. "
                + ", ".join(str(path / s) for s in splits[:3])
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
            "(or .jsonl.gz / .jsonl.zst), .csv, .json, a datasets folder, or - for stdin"
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


def _jsonl_records(f, chunk_rows: int) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    chunk: list[tuple[int, dict[str, Any] | str]] = []
    pos = 0
    with f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Windows editors)
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
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


def _json_records(path: Path, compression: str | None, chunk_rows: int):
    """A .json file: one JSON array of row objects (read whole; JSON has no record boundaries)."""
    with open_binary(path, compression) as f:
        raw = f.read()
    try:
        data = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=_no_duplicate_keys)
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


def _csv_reader(path: Path, compression: str | None):
    """pyarrow's streaming CSV reader with every column read as text (nulls for empty cells): a CSV has no
    types, and inferring them would turn an id `007` into 7 and could change type between blocks."""
    import pyarrow.csv as pacsv

    parse = pacsv.ParseOptions(newlines_in_values=True)
    with open_binary(path, compression) as f:
        names = pacsv.open_csv(f, parse_options=parse).schema.names
    # check_utf8=False: an undecodable cell is that row's error (`_batch_records`), not the whole file's
    conv = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=True, check_utf8=False
    )
    return pacsv.open_csv(open_binary(path, compression), parse_options=parse, convert_options=conv)


def _hf_dataset_files(path: Path) -> list[Path]:
    state = json.loads((path / "state.json").read_text())
    return [path / f["filename"] for f in state.get("_data_files", [])]


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


def _rechunk(batches, chunk_rows: int) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    pos, buf = 0, []
    for b in batches:
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
            return set(_csv_reader(path, compression).schema.names)
        if fmt == "hf-dataset":
            files = _hf_dataset_files(path)
            return set(next(_arrow_batches(files[:1])).schema.names) if files else set()
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    return None


def _records(path: Path, chunk_rows: int) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Chunks of (position, record) or (position, error text for an unreadable line)."""
    fmt, compression = input_format(path)
    try:
        if fmt == "jsonl":
            yield from _jsonl_records(open_binary(path, compression), chunk_rows)
            return
        if fmt == "json":
            yield from _json_records(path, compression, chunk_rows)
            return
    except OSError as e:  # a corrupt or truncated .gz/.zst stream (pyarrow's codec), or a read error
        raise InputFileError(f"{path}: cannot read as {FORMAT_NAMES[fmt]}: {e}") from e
    try:
        if fmt == "csv":
            batches = _csv_reader(path, compression)
        elif fmt == "hf-dataset":
            batches = _arrow_batches(_hf_dataset_files(path))
        else:
            batches = pq.ParquetFile(path).iter_batches(batch_size=chunk_rows)
        yield from _rechunk(batches, chunk_rows)
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


def check_input(path: str | Path, keep: tuple[str, ...] = ()) -> Path:
    """Whole-file checks done before any model loads. Raises InputFileError for a missing, empty or
    wrong-extension file, or a `--keep` column missing from a schema (Parquet, CSV header, datasets folder;
    JSONL/JSON: from every one of the first KEEP_SCAN_ROWS rows; a row without it later gets a null)."""
    path = Path(path)
    if not path.exists():
        input_format(path)  # an unknown extension is the better message
        raise InputFileError(f"{path}: no such file")
    input_format(path)
    if path.is_file() and path.stat().st_size == 0:
        raise InputFileError(f"{path}: file is empty")
    if not keep:
        return path
    names = input_columns(path)
    if names is not None:
        if missing := [k for k in keep if k not in names]:
            raise InputFileError(f"{path}: --keep column(s) not in the input: {', '.join(missing)}")
    else:  # JSONL has no schema: a column in none of the first rows is most likely a typo
        first = next(_records(path, KEEP_SCAN_ROWS), [])
        seen = {k for _, rec in first if isinstance(rec, dict) for k in rec}
        if missing := [k for k in keep if k not in seen]:
            raise InputFileError(
                f"{path}: --keep column(s) in none of the first {KEEP_SCAN_ROWS:,} rows: {', '.join(missing)}"
            )
    return path


def spool_stdin(folder: str | Path, stream=None) -> Path:
    """Copy standard input (`-`) into `folder` under a name whose extension is its sniffed format
    (Parquet magic → .parquet, `[` → .json, `{` → .jsonl, anything else → .csv), so every reader works on
    it unchanged. Returns the path. Raises InputFileError for empty input."""
    import sys

    src = stream if stream is not None else sys.stdin.buffer
    tmp = Path(folder) / "stdin.tmp"
    with open(tmp, "wb") as f:
        shutil.copyfileobj(src, f, 1 << 20)
    with open(tmp, "rb") as f:
        head = f.read(4096)
    if not head.strip():
        raise InputFileError("-: standard input is empty")
    first = head.lstrip()[:1]
    ext = ".parquet" if head[:4] == b"PAR1" else {b"[": ".json", b"{": ".jsonl"}.get(first, ".csv")
    return tmp.rename(tmp.with_name("stdin" + ext))


def read_rows(
    path: str | Path,
    questions: Any = None,
    keep: tuple[str, ...] = (),
    chunk_rows: int = 100_000,
    limit: int | None = None,
    readout: Any = None,
) -> Iterator[list[Any]]:
    """Yield chunks of parsed rows in input order (the first `limit` rows when given); `readout`
    (readouts/base.py) parses each record (default: the label-logprobs readout over `questions` and
    `keep`). Duplicate ids become RowErrors (the first one wins).

    Raises InputFileError for a missing, empty or wrong-extension file, or a `--keep` column that
    does not exist (Parquet: checked against the schema up front).
    """
    readout = readout or _default_readout(questions, keep)
    path = check_input(path, readout.keep)
    any_rows = False
    for out in parse_records(_records(path, chunk_rows), limit=limit, readout=readout):
        any_rows = True
        yield out
    if not any_rows:
        raise InputFileError(f"{path}: no rows")


def _default_readout(questions: Any, keep: tuple[str, ...]):
    from .readouts.label_logprobs import LabelLogprobs

    return LabelLogprobs(questions, keep)


def parse_records(
    chunks, questions: Any = None, keep: tuple[str, ...] = (), limit: int | None = None, readout: Any = None
) -> Iterator[list[Any]]:
    """Chunks of (position, record or unreadable-line text) → chunks of the readout's rows and RowErrors,
    with duplicate ids made RowErrors (the first one wins); stops after `limit` rows. Shared by files and
    the Python API."""
    readout = readout or _default_readout(questions, keep)
    seen: dict[str, int] = {}
    n = 0
    for chunk in chunks:
        if limit is not None and n + len(chunk) > limit:
            chunk = chunk[: limit - n]
        n += len(chunk)
        out: list[Any] = []
        for pos, rec in chunk:
            if isinstance(rec, str):  # an unreadable line: its id cannot be read
                out.append(readout.unreadable(pos, rec))
                continue
            row = readout.parse_row(pos, rec)
            if row.id is None:  # no usable id (already a RowError): nothing to deduplicate
                pass
            elif row.id in seen:
                row = readout.with_error(row, duplicate_id_error(row.id, seen[row.id], pos))
            else:
                seen[row.id] = pos
            out.append(row)
        if out:
            yield out
        if limit is not None and n >= limit:
            return


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
    """Writes tables of one schema to `path` as Parquet, JSONL (one object per output row) or CSV (header
    once; nested columns as JSON text). Used by ResultWriter.close for the joined output."""

    def __init__(self, path: Path, schema: pa.Schema, fmt: str):
        self.fmt = fmt
        if fmt == "parquet":
            self.w = pq.ParquetWriter(path, schema)
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            self.w = pacsv.CSVWriter(path, csv_ready(schema.empty_table()).schema)
        else:
            self.f = open(path, "w", encoding="utf-8")

    def write_table(self, t: pa.Table) -> None:
        if self.fmt == "parquet":
            self.w.write_table(t)
        elif self.fmt == "csv":
            self.w.write_table(csv_ready(t))
        else:
            for rec in t.to_pylist():
                self.f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        (self.f if self.fmt == "jsonl" else self.w).close()


def records_table(
    records: list[dict[str, Any]], keep: tuple[str, ...] = (), schema: pa.Schema | None = None
) -> pa.Table:
    """Output records → an Arrow table: the readout's columns (`schema`, default the label-logprobs
    OUTPUT_SCHEMA), then the kept columns with the type Arrow infers (mixed types, as a JSONL column may
    hold, become their JSON text)."""
    schema = schema if schema is not None else OUTPUT_SCHEMA
    cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in schema}
    for k in keep:
        vals = [r[k] for r in records]
        try:
            cols[k] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types in a JSONL column: keep their JSON text
            cols[k] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in vals])
    return pa.table(cols)


class ResultWriter:
    """Writes results chunk by chunk so a job can be resumed, and the target appears only when complete.

    Each input chunk's records go to ``<out>.partial/part-<chunk>.parquet`` (written to a temporary name,
    then renamed, so a part is either complete or absent — a SIGKILL leaves no torn file). A manifest
    records what produced the parts; `--resume` continues only when it matches. `close()` concatenates
    the parts in chunk order into ``<out>`` (atomic rename) and removes the folder.
    Kept columns keep the Arrow type of their first non-null values (unified across parts).
    Raises ConfigError when resuming a partial output made by a different job.
    """

    def __init__(
        self,
        path: str | Path,
        keep: tuple[str, ...] = (),
        manifest: dict | None = None,
        resume: bool = False,
        schema: pa.Schema | None = None,
    ):
        from .errors import ConfigError

        self.schema = schema if schema is not None else OUTPUT_SCHEMA  # the readout's columns
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.keep = keep
        self.rows_written = 0
        manifest = {**(manifest or {}), "keep": list(keep)}
        mpath = self.partial / "manifest.json"
        if resume and mpath.exists():
            old = json.loads(mpath.read_text())
            if old != manifest:
                diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
                raise ConfigError(
                    f"--resume: {self.partial} was made by a different job (differs in: "
                    f"{', '.join(diff)}); delete it or rerun without --resume"
                )
        else:
            if self.partial.exists():
                shutil.rmtree(self.partial)
            self.partial.mkdir(parents=True)
            mpath.write_text(json.dumps(manifest))
        for tmp in self.partial.glob("*.tmp"):
            tmp.unlink()

    def part(self, chunk: int) -> Path:
        return self.partial / f"part-{chunk:06d}.parquet"

    def done(self, chunk: int) -> pa.Table | None:
        """The finished part of `chunk` (resume), or None."""
        p = self.part(chunk)
        return pq.read_table(p) if p.exists() else None

    def write(self, chunk: int, records: list[dict[str, Any]]) -> None:
        tmp = self.part(chunk).with_suffix(".tmp")
        pq.write_table(records_table(records, self.keep, self.schema), tmp)
        os.replace(tmp, self.part(chunk))
        self.rows_written += len(records)

    def close(self) -> Path:
        """Concatenate the parts into the target path (atomically). Returns the path."""
        parts = sorted(self.partial.glob("part-*.parquet"))
        schemas = [pq.read_schema(p) for p in parts]
        fields = list(self.schema)
        for k in self.keep:
            types = [s.field(k).type for s in schemas if not pa.types.is_null(s.field(k).type)]
            t = types[0] if types else pa.string()
            if any(x != t for x in types):
                t = pa.string()  # a column whose type changed between chunks: written as text
            fields.append(pa.field(k, t))
        schema = pa.schema(fields)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with TableWriter(tmp, schema, output_format(self.path)) as w:
            for p in parts:
                t = pq.read_table(p)
                cols = []
                for f in schema:
                    c = t.column(f.name)
                    if c.type != f.type:
                        c = (
                            c.cast(f.type)
                            if not pa.types.is_string(f.type) or pa.types.is_null(c.type)
                            else pa.array(
                                [
                                    None if v is None else (v if isinstance(v, str) else json.dumps(v))
                                    for v in c.to_pylist()
                                ],
                                pa.string(),
                            )
                        )
                    cols.append(c)
                w.write_table(pa.Table.from_arrays(cols, schema=schema))
        os.replace(tmp, self.path)
        shutil.rmtree(self.partial)
        return self.path
