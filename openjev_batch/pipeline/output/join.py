"""The join: check that a partial output's parts are exactly this run's chunks, then concatenate them in chunk
order into one output file (Parquet, JSONL, JSON, CSV, TSV: write.TableWriter).

The check (the store's count check): the parts are chunks 0…n−1 of this run, each made by this job (the job
id in its metadata) with the number of records the ledger says its chunk needs. Kept columns get one type
whatever the chunking: a Parquet input's own column types; for JSONL the type every part's values agree on
(kept_types.py), else JSON text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import OutputCheckError
from .kept_types import as_text, decode_type, unify_types
from .ledger import Ledger
from .parts import PART_GLOB, kept_part_types, made_by, part_path
from .write import TableWriter


def check_parts(partial: Path, ledger: Ledger, job_id: str) -> None:
    """Raise OutputCheckError unless the parts under `partial` are exactly chunks 0…n−1 of the ledger's run,
    each of job `job_id` and with the records its chunk needs."""
    n = ledger.seen
    want = {part_path(partial, i).name for i in range(n)}
    have = {p.name for p in partial.glob(PART_GLOB)}
    rows, need = ledger.totals()
    if have != want:
        odd = sorted(have - want)[:3] + sorted(want - have)[:3]
        raise OutputCheckError(
            f"count check failed: {rows} input rows need {need} output rows in {n} parts, the partial "
            f"output has {len(have)} parts (not matching: {', '.join(odd)}); "
            f"delete {partial.name} and rerun"
        )
    for i in range(n):
        p = part_path(partial, i)
        if not made_by(p, job_id, i):
            raise OutputCheckError(
                f"{p} was not written by this job (its job id or chunk differs from the manifest); "
                f"delete {partial.name} and rerun"
            )
        got = pq.read_metadata(p).num_rows
        if got != ledger.records(i):
            raise OutputCheckError(
                f"count check failed: input chunk {i} needs {ledger.records(i)} output rows, "
                f"{p.name} has {got}; delete {partial.name} and rerun"
            )


class Join:
    """The joined output of `parts` (in chunk order): the readout's columns (`schema`), then the kept ones.
    `kept_types`: the input's own types (None: JSONL, unified over the parts here)."""

    def __init__(
        self,
        parts: list[Path],
        schema: pa.Schema,
        keep: tuple[str, ...],
        kept_types: dict[str, pa.DataType] | None,
    ):
        self.parts, self.readout_schema, self.keep, self.kept_types = parts, schema, keep, kept_types
        self.final = self._final_types()
        fields = list(schema)
        for k in keep:
            t = self.final[k]
            fields.append(pa.field(k, pa.string() if t is None or pa.types.is_null(t) else t))
        self.schema = pa.schema(fields)

    def _final_types(self) -> dict[str, pa.DataType | None]:
        if self.kept_types is not None:
            return dict(self.kept_types)
        out: dict[str, pa.DataType | None] = dict.fromkeys(self.keep, pa.null())
        for p in self.parts:
            types = kept_part_types(p)
            for k in self.keep:
                out[k] = unify_types(out[k], decode_type(types.get(k)))
        return out  # None: no common type (text)

    def write(self, path: Path, fmt: str, metadata: dict[bytes, bytes] | None = None) -> None:
        """Write the joined output to `path` as `fmt` (options.output_format); `metadata`: the Parquet
        file's key-value metadata (ignored by the text formats)."""
        with TableWriter(path, self.schema, fmt, metadata) as w:
            for p in self.parts:
                w.write_table(self._table(pq.read_table(p)))

    def _table(self, t: pa.Table) -> pa.Table:
        cols = [t.column(f.name) for f in self.readout_schema]
        for k in self.keep:
            c = t.column(k)
            if self.kept_types is None:  # JSON text → the column's type, or text when none
                vals = [None if s is None else json.loads(s) for s in c.to_pylist()]
                if self.final[k] is None:
                    c = pa.array([as_text(v) for v in vals], pa.string())
                else:
                    c = pa.array(vals, type=self.schema.field(k).type)
            cols.append(c)
        return pa.Table.from_arrays(cols, schema=self.schema)
