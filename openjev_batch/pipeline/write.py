"""Write: each input chunk's records to a crash-safe part under `<out>.partial/` with the job's manifest (the
`--resume` key), then the parts joined into the output (Parquet, JSONL or CSV), atomically."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..options import output_format  # parts are always Parquet; the joined file is written in this format
from ..readouts.label_logprobs import OUTPUT_SCHEMA


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
        from ..errors import ConfigError

        self.schema = schema if schema is not None else OUTPUT_SCHEMA  # the readout's columns
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.keep = keep
        self.rows_written = 0
        manifest = {**(manifest or {}), "keep": list(keep)}
        self._lock = _lock_output(self.path)
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
        self.lock_path.unlink(missing_ok=True)
        self._lock.close()
        return self.path

    @property
    def lock_path(self) -> Path:
        return lock_path(self.path)


def lock_path(out: Path) -> Path:
    return out.with_name(out.name + ".lock")


def _lock_output(out: Path):
    """Hold an exclusive lock on `<out>.lock` for the job's life: a second job on the same output would
    otherwise delete the first one's partial folder and the two would write, join and rename each other's
    parts (seen: the second died on a vanished `part-*.tmp`). Released by close() or when the process ends."""
    import fcntl

    from ..errors import ConfigError

    f = open(lock_path(out), "a")  # noqa: SIM115 — held open until close()
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise ConfigError(
            f"another job is writing {out} (it holds {lock_path(out)}); wait for it or pick another -o"
        ) from None
    return f
