"""Staged results under `<out>.partial/ray/`: one file per result block (complete or absent), read back with
the latest run's rows winning, so an interrupted Ray run resumes."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ....readouts.base import Readout
from ...output.store import STAGE_DIR
from .stages import _EXTRA


def stage_dir(output: str | Path) -> Path:
    """`<out>.partial/ray/`, the folder the output store keeps for the Ray runner (store.STAGE_DIR)."""
    out = Path(output)
    return out.with_name(out.name + ".partial") / STAGE_DIR


# -- staging (<out>.partial/ray/r<run>-<seq>.parquet) ----------------------------------------------------
def _stage_files(stage: Path) -> list[tuple[int, Path]]:
    out = []
    for p in sorted(stage.glob("r*-*.parquet")):
        try:
            out.append((int(p.name[1:].split("-")[0]), p))
        except ValueError:
            continue
    return out


def read_stage(stage: Path, columns: list[str] | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """Staged rows of every earlier run with a `_run` column; for each input position only the rows of
    the latest run that has it (an older, partial attempt at a row is superseded). `schema`: the staged
    files' schema, for the empty table when there are none."""
    cols = None if columns is None else sorted(set(columns) | {"_pos"})
    tables = []
    for run, p in _stage_files(stage):
        t = pq.read_table(p, columns=cols)
        tables.append(t.append_column("_run", pa.array(np.full(t.num_rows, run, np.int64))))
    if not tables:
        full = schema if schema is not None else pa.schema([pa.field(n, t) for n, t in _EXTRA])
        schema = full if cols is None else pa.schema([full.field(c) for c in cols])
        return schema.empty_table().append_column("_run", pa.array([], pa.int64()))
    t = pa.concat_tables(tables)
    pos, runs = t.column("_pos").to_numpy(), t.column("_run").to_numpy()
    latest = np.zeros(int(pos.max()) + 1, np.int64)
    np.maximum.at(latest, pos, runs)
    return t.filter(pa.array(runs == latest[pos]))


def _write_stage(stage: Path, run: int, seq: int, table: pa.Table) -> None:
    p = stage / f"r{run:04d}-{seq:06d}.parquet"
    tmp = p.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, p)  # a staged file is complete or absent


def _records_of(table: pa.Table, readout: Readout) -> list[dict[str, Any]]:
    recs = table.select(readout.schema.names + ["_kept"]).to_pylist()
    for r in recs:
        r.update(pickle.loads(r.pop("_kept")))
    return recs
