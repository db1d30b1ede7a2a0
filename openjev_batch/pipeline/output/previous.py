"""Earlier outputs a job copies answers from (`run --reuse PREVIOUS`, `Classifier.run(…, reuse=…)`): each
one's records by their answer key (the `answer_key` column every output carries; pipeline/reuse.py makes
the keys), read once when the job starts.

An earlier output is used only when it is one of this job's kind: its manifest (manifest.py) agrees with
the job's on everything that changes a number (`refuse` says where not). Otherwise nothing
is taken from it and one line says why (`notes`): another model, other questions or options, no manifest,
no answer keys, a format that cannot hold the list columns. A row is taken only whole and answered: a row
with any error in an earlier output is computed again (a failure may have been the machine's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...core import ANSWER_KEY
from ...errors import ConfigError
from ...options import output_format
from ...values import sha256_file
from . import manifest as output_manifest

# the formats that keep the list columns (options, probs): CSV and TSV write them as text
READABLE = ("parquet", "jsonl", "jsonl.gz")


class Previous:
    """The answered rows of earlier outputs by answer key. `sources`: output paths (the CLI) or tables (the
    Python API: a polars or pandas DataFrame or an Arrow table a run returned); `manifest`: the job's;
    `refuse(old, new)`: why an earlier manifest is not of this job's kind, empty when it is (reuse.Keys);
    `schema`: the job's columns (the readout's and the answer key). The first source holding a key wins."""

    def __init__(self, sources: Iterable[Any], manifest: dict, schema: pa.Schema, refuse: Callable) -> None:
        self.schema = schema
        self.tables: list[pa.Table] = []
        self.index: dict[str, tuple[int, int, int]] = {}  # key → (table, first record, records)
        self.files: list[dict[str, Any]] = []  # per source used: its file and sha256, the rows taken from it
        self.notes: list[str] = []  # per source not used: why, one line each
        for src in sources:
            self._add(src, manifest, refuse)

    def _add(self, src: Any, manifest: dict, refuse: Callable) -> None:
        if isinstance(src, (str, os.PathLike)):
            path = Path(src)
            try:
                table = _read(path, manifest, self.schema, refuse)
            except _Skip as e:
                self.notes.append(f"nothing reused from {path}: {e}")
                return
            entry: dict[str, Any] = {"file": str(path.absolute()), "sha256": sha256_file(path), "rows": 0}
        else:
            table = _arrow(src, self.schema)
            if table is None:
                self.notes.append(f"nothing reused from a {type(src).__name__}: it has no {ANSWER_KEY} column")
                return
            entry = {"file": f"<{type(src).__name__}>", "sha256": None, "rows": 0}
        self.files.append(entry)
        self.tables.append(table)
        self._index(len(self.tables) - 1, table)

    def _index(self, t: int, table: pa.Table) -> None:
        """Each key's records (consecutive in an output: a row's records are), when none has an error."""
        keys = table.column(ANSWER_KEY).to_pylist()
        ok = table.column("error").is_null().to_pylist()
        i, n = 0, len(keys)
        while i < n:
            j = i + 1
            while j < n and keys[j] == keys[i]:
                j += 1
            if keys[i] is not None and all(ok[i:j]) and keys[i] not in self.index:
                self.index[keys[i]] = (t, i, j - i)
            i = j

    def take(self, key: str | None, records: int) -> list[dict[str, Any]] | None:
        """The records of the row with answer key `key`, when an earlier output holds all `records` of
        them answered; else None (the row is computed)."""
        hit = self.index.get(key) if key is not None else None
        if hit is None or hit[2] != records:
            return None
        t, start, n = hit
        self.files[t]["rows"] += 1
        return self.tables[t].slice(start, n).to_pylist()


class _Skip(Exception):
    """An earlier output that is not used (its message is the note's reason)."""


def _read(path: Path, manifest: dict, schema: pa.Schema, refuse: Callable) -> pa.Table:
    """The job's columns of the earlier output at `path`. Raises _Skip naming why it is not used."""
    if not path.is_file():
        raise _Skip("no such file")
    try:
        fmt = output_format(path)
    except ValueError:
        fmt = ""
    if fmt not in READABLE:
        raise _Skip("it is not a Parquet or JSONL output (CSV holds the answer lists as text)")
    try:
        doc = output_manifest.read(path)
    except ConfigError as e:  # a sidecar that no longer describes its output
        raise _Skip(str(e).removeprefix("--resume: ")) from None
    if doc is None:
        raise _Skip("it carries no manifest of openjev-batch")
    if diff := refuse(doc["manifest"], manifest):
        raise _Skip(f"it was made by another model or with other options (differs in: {', '.join(diff)})")
    try:
        return _load(path, fmt, schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        raise _Skip(f"it has no {ANSWER_KEY} column with this job's columns (written before --reuse?)") from None


def _load(path: Path, fmt: str, schema: pa.Schema) -> pa.Table:
    if fmt == "parquet":
        import pyarrow.parquet as pq  # lazy: pyarrow's Parquet module loads only where it is read

        names = pq.read_schema(path).names
        if any(n not in names for n in schema.names):
            raise KeyError(ANSWER_KEY)
        return pq.read_table(path, columns=schema.names).cast(schema)
    import pyarrow.json as pj  # lazy: as above

    opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pj.read_json(path, parse_options=opts)
    if table.column(ANSWER_KEY).null_count == table.num_rows:
        raise KeyError(ANSWER_KEY)
    return table.select(schema.names)


def _arrow(data: Any, schema: pa.Schema) -> pa.Table | None:
    """A table a run returned (polars, pandas or Arrow) as the job's columns; None without answer keys."""
    if hasattr(data, "to_arrow"):  # polars
        data = data.to_arrow()
    elif not isinstance(data, pa.Table):  # pandas
        data = pa.Table.from_pandas(data, preserve_index=False)
    if any(n not in data.column_names for n in schema.names):
        return None
    return data.select(schema.names).cast(schema)
