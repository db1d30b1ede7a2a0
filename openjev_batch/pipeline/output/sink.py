"""Where a job's records go (pipeline/loop.py writes every job through one of these): the output store
(`StoreSink`: store.OutputStore, its parts, ledger, resume and join), an in-memory table (`MemorySink`:
the Python API) or nowhere (`NullSink`: `--dry-run`, `--show-prompt`, `validate`). Opened for one job, a
sink answers what the loop asks of the store: `check_finished` (`--resume`), `begin_chunk`, `done(i)` (a finished part, or None), `write`,
`amend`, `close` (`Output`; `Sink` is the protocol). `keeps_manifest`: the sink keeps the job's manifest (the
loop computes it only then: it fingerprints the model's files); `keeps_keys`: its records carry their answer
keys (pipeline/reuse.py; the columns: write.job_schema)."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import pyarrow as pa

from ...readouts.base import Readout
from .store import OutputStore
from .write import job_schema, records_table

if TYPE_CHECKING:
    from ...config import RunConfig


class Output(Protocol):
    """An opened sink, for one job (a store: store.OutputStore; the others are their own): the loop's calls
    in the order it makes them. `partial`: the folder kept for `--resume` (None: nothing to resume);
    `rows_written`: the records written so far; `close()` gives what the job returns (a path, a table)."""

    partial: Path | None
    rows_written: int

    def check_finished(self, digests: Iterable[str | None]) -> None: ...

    def begin_chunk(self, chunk: int, rows: int, records: int, input_sha256: str | None) -> None: ...

    def done(self, chunk: int) -> pa.Table | None: ...

    def write(self, chunk: int, records: Any, info: dict | None = None) -> None: ...

    def amend(self, key: str, value: Any) -> None: ...

    def close(self) -> Any: ...


class Sink(Protocol):
    """What the loop asks of a sink: whether it keeps the job's manifest (`keeps_manifest`), and its output
    for one job, opened as a context (`open`: locked, kept when the job fails)."""

    keeps_manifest: bool
    keeps_keys: bool

    def open(self, manifest: dict, readout: Readout) -> AbstractContextManager[Output]: ...


class StoreSink:
    """The output store at `cfg.output` (store.py); the kept columns get `source`'s types where it has a
    schema (a Parquet input's own), read when the store opens (after the source's checks)."""

    keeps_manifest = True
    keeps_keys = True

    def __init__(self, cfg: RunConfig, source: Any):
        self.cfg, self.source = cfg, source

    def open(self, manifest: dict, readout: Readout):
        """The job's OutputStore, locked (a context manager: keeps the partial when the job fails)."""
        cfg = self.cfg
        output = cast(Path, cfg.output)  # a job that writes (--dry-run opens no store)
        return OutputStore(
            output, cfg.keep, manifest, cfg.resume, self.source.kept_types(), schema=job_schema(readout.schema)
        )


class _Unstored:
    """What a sink that keeps no files shares: no manifest, no partial to resume, no ledger; it is its own
    context (nothing to lock or release)."""

    keeps_manifest = False
    keeps_keys = False
    partial = None  # no partial output to offer for --resume

    def open(self, manifest: dict, readout: Readout):
        self.readout = readout
        return self

    def begin_chunk(self, chunk: int, rows: int, records: int, input_sha256: str | None) -> None:
        pass

    def check_finished(self, digests) -> None:
        pass  # no finished output to find: `digests` is left unread

    def amend(self, key: str, value: Any) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class MemorySink(_Unstored):
    """The job's output as one Arrow table in memory (the Python API); nothing to resume. Kept columns get
    their type from all their values at once (write.records_table), as one table of the whole job would."""

    keeps_keys = True  # a DataFrame a run returns is an earlier output of the next (`reuse=`)

    def __init__(self) -> None:
        self.parts: dict[int, pa.Table] = {}  # the readout's columns, per chunk
        self.kept: dict[int, list[dict[str, Any]]] = {}  # the kept columns' values, per chunk
        self.rows_written = 0

    def done(self, chunk: int) -> pa.Table | None:
        return self.parts.get(chunk)

    def write(self, chunk: int, records: list[dict[str, Any]], info: dict | None = None) -> None:
        self.parts[chunk] = records_table(records, (), job_schema(self.readout.schema))
        self.kept[chunk] = [{k: r[k] for k in self.readout.keep} for r in records]
        self.rows_written += len(records)

    def close(self) -> pa.Table:
        """Every part in chunk order, as one table (the readout's columns, then the kept ones)."""
        r = self.readout
        order = sorted(self.parts)
        table = pa.concat_tables([self.parts[i] for i in order]) if order else job_schema(r.schema).empty_table()
        if r.keep:
            kept = records_table([v for i in order for v in self.kept[i]], r.keep, pa.schema([]))
            for k in r.keep:
                table = table.append_column(k, kept.column(k))
        return table


class NullSink(_Unstored):
    """No output: nothing written, no lock, nothing to resume; each chunk's records are only counted (the
    loop's totals and count check). A runner that scores nothing (runners/plan_only, runners/parse_only)
    gives them as one table of stand-ins (runners.stand_ins: the readout's columns, `id` and `error`
    filled), kept as the chunk's part so the totals count it as they count a stored part. Only the last part
    is held: memory stays one chunk's, whatever the input's size."""

    def __init__(self) -> None:
        self.rows_written = 0
        self.last: tuple[int, pa.Table] | None = None

    def done(self, chunk: int) -> pa.Table | None:
        return self.last[1] if self.last is not None and self.last[0] == chunk else None

    def write(self, chunk: int, records: pa.Table, info: dict | None = None) -> None:
        self.last = (chunk, records)
        self.rows_written += records.num_rows

    def close(self) -> None:
        return None
