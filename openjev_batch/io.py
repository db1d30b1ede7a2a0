"""Read input in bounded chunks (Parquet or JSONL, by extension) and write results to Parquet.

Reading never raises for a bad row: a JSONL line that is not valid UTF-8 / JSON / an object becomes a
`RowError` naming its line. Whole-file problems (missing, wrong extension, unreadable, empty) raise
InputFileError. Writing goes to ``<out>.partial`` and is renamed into place only by `close()`, so the
target path never holds a truncated file.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputFileError
from .schema import Row, RowError, duplicate_id_error, ids_and_types, parse_row, unidentified_row_error

JSONL_EXT = (".jsonl", ".ndjson")
KEEP_SCAN_ROWS = 1_000  # JSONL rows read up front to check that each --keep column exists
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


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: plain json.loads keeps the last of two equal keys silently (two options with
    one name would merge); raise instead, naming the key."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r} in a JSON object")
    return d


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
                    rec = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
                    if not isinstance(rec, dict):
                        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
                    chunk.append((pos, rec))
                except UnicodeDecodeError as e:
                    chunk.append((pos, f"line {lineno}: not valid UTF-8 (byte {e.start})"))
                except json.JSONDecodeError as e:
                    chunk.append((pos, f"line {lineno}: malformed JSON ({e})"))
                except ValueError as e:
                    chunk.append((pos, f"line {lineno}: {e}"))
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
    wrong-extension file, or a `--keep` column missing from a Parquet schema (JSONL: from every one of the
    first KEEP_SCAN_ROWS rows; a row without it later gets a null)."""
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
    elif keep:  # JSONL has no schema: a column in none of the first rows is most likely a typo
        first = next(_records(path, KEEP_SCAN_ROWS), [])
        seen = {k for _, rec in first if isinstance(rec, dict) for k in rec}
        if missing := [k for k in keep if k not in seen]:
            raise InputFileError(
                f"{path}: --keep column(s) in none of the first {KEEP_SCAN_ROWS:,} rows: {', '.join(missing)}"
            )
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
            if isinstance(rec, str):  # an unreadable line: its id cannot be read
                out.append(unidentified_row_error(pos, rec, questions, dict.fromkeys(keep)))
                continue
            row = parse_row(pos, rec, questions, keep)
            if row.id is None:  # no usable id (already a RowError): nothing to deduplicate
                pass
            elif row.id in seen:
                qids, qtypes = (
                    (row.qids, row.qtypes) if isinstance(row, RowError) else ids_and_types(row.questions)
                )
                err = duplicate_id_error(row.id, seen[row.id], pos)
                row = RowError(pos, row.id, err, qids, row.kept, qtypes)
            else:
                seen[row.id] = pos
            out.append(row)
        yield out
    if not any_rows:
        raise InputFileError(f"{path}: no rows")


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
        self, path: str | Path, keep: tuple[str, ...] = (), manifest: dict | None = None, resume: bool = False
    ):
        from .errors import ConfigError

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
        cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in OUTPUT_SCHEMA}
        for k in self.keep:
            vals = [r[k] for r in records]
            try:
                cols[k] = pa.array(vals)
            except (
                pa.ArrowInvalid,
                pa.ArrowTypeError,
            ):  # mixed types in a JSONL column: keep their JSON text
                cols[k] = pa.array([v if v is None or isinstance(v, str) else json.dumps(v) for v in vals])
        tmp = self.part(chunk).with_suffix(".tmp")
        pq.write_table(pa.table(cols), tmp)
        os.replace(tmp, self.part(chunk))
        self.rows_written += len(records)

    def close(self) -> Path:
        """Concatenate the parts into the target path (atomically). Returns the path."""
        parts = sorted(self.partial.glob("part-*.parquet"))
        schemas = [pq.read_schema(p) for p in parts]
        fields = list(OUTPUT_SCHEMA)
        for k in self.keep:
            types = [s.field(k).type for s in schemas if not pa.types.is_null(s.field(k).type)]
            t = types[0] if types else pa.string()
            if any(x != t for x in types):
                t = pa.string()  # a column whose type changed between chunks: written as text
            fields.append(pa.field(k, t))
        schema = pa.schema(fields)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with pq.ParquetWriter(tmp, schema) as w:
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
