"""Read input in bounded chunks (Parquet, JSONL — also .gz/.zst —, CSV, JSON, a `datasets` folder; by
extension) and write results (Parquet, JSONL or CSV, by extension).

Reading never raises for a bad row: a JSONL line that is not valid UTF-8 / JSON / an object becomes a
`RowError` naming its line. Whole-file problems (missing, wrong extension, unreadable, empty) raise
InputFileError. The output store (parts, manifest, lock, resume, join) is store.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import readouts
from ...core import ANSWER_KEY, duplicate_id_error
from ...errors import InputFileError
from ...readouts import default_readout
from ...values import no_symlink_loop
from .formats import has_rows, input_columns, input_format, record_chunks, refuse_repeated_columns

if TYPE_CHECKING:
    from ...config import RunConfig

KEEP_SCAN_ROWS = 1_000  # JSONL rows read up front to check that each --keep column exists


def check_exists(path: str | Path) -> Path:
    """An input that exists, in a format by its extension. Raises InputFileError."""
    path = Path(path)
    try:
        no_symlink_loop(path)  # exists() says False for a loop: "no such file" named no cause (issue 34.17)
    except ValueError as e:
        raise InputFileError(str(e)) from None
    if not path.exists():
        if not path.suffix:  # a datasets folder has none: not an "unknown extension '(none)'" (issue 34.9)
            raise InputFileError(f"{path}: no such file or folder")
        input_format(path)  # an unknown extension is the better message
        raise InputFileError(f"{path}: no such file")
    input_format(path)
    return path


def check_input(path: str | Path, keep: tuple[str, ...] = ()) -> Path:
    """Whole-file checks done before any model loads. Raises InputFileError for a missing, empty or
    wrong-extension file, or a `--keep` column missing from a schema (Parquet, CSV header, datasets folder;
    JSONL/JSON: from every one of the first KEEP_SCAN_ROWS rows; a row without it later gets a null)."""
    path = check_exists(path)
    if path.is_file() and path.stat().st_size == 0:
        raise InputFileError(f"{path}: file is empty")
    refuse_repeated_columns(path)
    if not has_rows(path):  # blank lines only, a header only, 0 rows: refused before the model loads
        raise InputFileError(f"{path}: no rows")
    if not keep:
        return path
    names = input_columns(path)
    if names is not None:
        if missing := [k for k in keep if k not in names]:
            raise InputFileError(f"{path}: --keep column(s) not in the input: {', '.join(missing)}")
    else:  # JSONL has no schema: a column in none of the first rows is most likely a typo
        first = next(record_chunks(path, KEEP_SCAN_ROWS), [])
        seen = {k for _, rec in first if isinstance(rec, dict) for k in rec}
        if missing := [k for k in keep if k not in seen]:
            raise InputFileError(
                f"{path}: --keep column(s) in none of the first {KEEP_SCAN_ROWS:,} rows: {', '.join(missing)}"
            )
    return path


def check_has_column(path: str | Path, column: str, hint: str) -> None:
    """A column the readout needs in some row (`Readout.needed_columns`: each row's `state`; `run` without
    --questions reads each row's `questions`): an input where none of the first KEEP_SCAN_ROWS rows has it
    would load the model and write a file of errors (issue 34.4; a new-user trial's `body` column), so it is a
    job error (InputFileError) naming the columns it has, before the model loads. Later rows without it stay
    row errors, as are unreadable rows (the check is then left to the rows)."""
    first = next(record_chunks(Path(path), KEEP_SCAN_ROWS), [])
    recs = [rec for _, rec in first if isinstance(rec, dict)]  # a list of dicts (mypy narrows no any())
    if len(recs) < len(first):
        # an unreadable row (invalid UTF-8, UTF-16, a repeated key, a ragged CSV line) is a row error naming its
        # line, and the rows after it are read: 1,000 unreadable leading rows were refused as "no row has a
        # `state` field … rename", a false hint, with the good rows after them unanswered (issue 42)
        return
    if not any(_given(rec.get(column)) for rec in recs):
        scope = (
            "no row has" if len(first) < KEEP_SCAN_ROWS else f"none of the first {KEEP_SCAN_ROWS:,} rows has"
        )
        if any(rec.get(column) is not None for rec in recs):  # `questions: {}` in every row (issue 42)
            every = "every row's" if len(first) < KEEP_SCAN_ROWS else f"each of the first {KEEP_SCAN_ROWS:,} rows'"
            raise InputFileError(f"{path}: no {column}: {every} `{column}` is empty; {hint}")
        seen = list(dict.fromkeys(str(k) for _, rec in first if isinstance(rec, dict) for k in rec))
        has = f" (the rows have: {', '.join(seen[:20])}{', …' if len(seen) > 20 else ''})" if seen else ""
        raise InputFileError(f"{path}: no {column}: {scope} a `{column}` field{has}; {hint}")


def _given(value: Any) -> bool:
    """Whether a needed column's value holds something: not null, and not an empty text, object or list (nor the
    JSON text of one, `"{}"`): a `questions` of `{}` in every row loaded the model to answer nothing."""
    if isinstance(value, str):
        return value.strip() not in ("", "{}", "[]")
    return value is not None and value not in ({}, [])


def all_columns(cfg: RunConfig) -> tuple[str, ...]:
    """`--keep all`, as the Python API's keep="all": every column of the input's first KEEP_SCAN_ROWS rows in
    the order first seen (a schema's order for Parquet and CSV), except those `cfg`'s readout reads or
    writes. Raises InputFileError as check_input does."""
    skip = {*readouts.input_columns(cfg.readout), *readouts.build(cfg.readout, cfg).schema.names, ANSWER_KEY}
    first = next(record_chunks(check_input(cfg.input), KEEP_SCAN_ROWS), [])
    seen = dict.fromkeys(k for _, rec in first if isinstance(rec, dict) for k in rec)
    return tuple(k for k in seen if k not in skip)


def read_rows(
    path: str | Path,
    questions: Any = None,
    keep: tuple[str, ...] = (),
    chunk_rows: int | None = None,
    limit: int | None = None,
    readout: Any = None,
    hasher: Any = None,
) -> Iterator[list[Any]]:
    """Yield chunks of parsed rows in input order (the first `limit` rows when given); `readout`
    (readouts/base.py) parses each record (default: the registry's default readout over `questions` and
    `keep`), read `chunk_rows` at a time (default: the readout's, as a job's). Duplicate ids become
    RowErrors (the first one wins). `hasher`: the input's content hash up to
    the end of the chunk just yielded (formats.record_chunks).

    Raises InputFileError for a missing, empty or wrong-extension file, or a `--keep` column that
    does not exist (Parquet: checked against the schema up front).
    """
    readout = readout or _default_readout(questions, keep)
    path = check_input(path, readout.keep)
    any_rows = False
    chunks = record_chunks(path, chunk_rows or readout.chunk_rows, hasher)
    for out in parse_records(chunks, limit=limit, readout=readout):
        any_rows = True
        yield out
    if not any_rows:
        raise InputFileError(f"{path}: no rows")


def job_rows(cfg: RunConfig, readout: Any) -> tuple[Iterator[list[Any]], Any]:
    """A job's input (`cfg`: a RunConfig's input, keep, chunk_rows, limit) as chunks of `readout`'s rows,
    and the sha256 hasher the reader feeds: its digest, read once a chunk is yielded, is the input's content
    up to that chunk's end, by which `--resume` identifies the input (store.OutputStore.begin_chunk). The
    local loop and the Ray driver both read through it."""
    digest = hashlib.sha256()
    rows = read_rows(
        cfg.input, keep=cfg.keep, chunk_rows=cfg.chunk_rows, limit=cfg.limit, readout=readout, hasher=digest
    )
    return rows, digest


def _default_readout(questions: Any, keep: tuple[str, ...]):
    return default_readout(keep, questions)


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
