"""The part files under `<out>.partial/`: `part-NNNNNN.parquet`, one input chunk's output records.

A part's Parquet metadata names the job that wrote it and its chunk (so the join and a fresh run tell this
output's parts from anyone else's files), and keeps what the summary needs that the records do not
(`part_info`: warm-up and planned unique tokens), so a resumed job reports the whole job. A part is written
under a unique temporary name and renamed into place: complete or absent, a SIGKILL leaves no torn part.
Kept columns: a Parquet input's own types; for JSONL (no schema) each value as JSON text and the type the
part's values agree on (kept_types.py), which the join unifies over all parts.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import OutputCheckError
from .kept_types import encode_type, unify_types, value_type

PART_GLOB = "part-[0-9]*.parquet"
META_JOB, META_CHUNK, META_TYPES = b"openjev.job", b"openjev.chunk", b"openjev.kept_types"
META_INFO = b"openjev.info"


def atomic_write(path: Path, data: bytes) -> None:
    """`data` at `path`, complete or not at all (a temporary beside it, renamed into place)."""
    tmp = path.with_name(f".part-{path.name}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def part_path(partial: Path, chunk: int) -> Path:
    return partial / f"part-{chunk:06d}.parquet"


def part_meta(p: Path) -> dict[bytes, bytes]:
    return pq.read_schema(p).metadata or {}


def part_job(p: Path) -> str | None:
    """The job id in part `p`'s metadata (None: not a part of this store)."""
    try:
        return part_meta(p).get(META_JOB, b"").decode() or None
    except Exception:  # not Parquet, unreadable: a file the store did not write
        return None


@contextlib.contextmanager
def readable_part(p: Path) -> Iterator[None]:
    """Reading the finished part `p` (resume): a part that cannot be read (truncated, a flipped byte: parts
    are written whole, so the disk or a hand changed it) raises OutputCheckError naming it and the fix,
    not pyarrow's traceback or a message that names no file (hostile trial, issue 34)."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        why = " ".join(str(e).split())  # pyarrow's messages may hold line breaks
        raise OutputCheckError(
            f"--resume: {p} cannot be read ({why}); delete it and rerun with --resume (its chunk is run again)"
        ) from None


def made_by(p: Path, job_id: str, chunk: int) -> bool:
    """Whether part file `p` is chunk `chunk` of job `job_id`."""
    meta = part_meta(p)
    return meta.get(META_JOB) == job_id.encode() and meta.get(META_CHUNK) == str(chunk).encode()


def part_info(part: pa.Table) -> dict[str, int]:
    """The numbers a part's chunk kept in its metadata (`write_part(info=…)`); {} for a part written
    without them (the Ray runner's, which counts warm-up tokens per engine actor, not per chunk)."""
    try:
        return {str(k): int(v) for k, v in json.loads((part.schema.metadata or {})[META_INFO]).items()}
    except (KeyError, ValueError, TypeError, AttributeError):
        return {}


def kept_part_types(part: Path) -> dict[str, Any]:
    """The encoded kept-column types a JSONL job's part agreed on (kept_types.encode_type), by column."""
    return json.loads(part_meta(part).get(META_TYPES, b"{}"))


def write_part(
    partial: Path,
    chunk: int,
    job_id: str,
    records: list[dict[str, Any]],
    schema: pa.Schema,
    keep: tuple[str, ...] = (),
    kept_types: dict[str, pa.DataType] | None = None,
    info: dict[str, int] | None = None,
) -> Path:
    """Write chunk `chunk`'s part of job `job_id`: the readout's columns (`schema`), then the kept ones.
    `kept_types`: the input's own column types (None: JSONL, see the module doc). Returns its path."""
    cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in schema}
    types: dict[str, str | None] = {}
    for k in keep:
        vals = [r[k] for r in records]
        if kept_types is not None:  # Parquet input: its own column type
            cols[k] = pa.array(vals, type=kept_types[k])
            continue
        # JSONL: keep every value as JSON text and the type they agree on; the join decides the column's
        # type over all parts, so it does not depend on where the chunks were cut.
        t: pa.DataType | None = pa.null()
        for v in vals:
            t = unify_types(t, value_type(v))
            if t is None:
                break
        types[k] = encode_type(t)
        cols[k] = pa.array([None if v is None else json.dumps(v) for v in vals], pa.string())
    meta = {META_JOB: job_id.encode(), META_CHUNK: str(chunk).encode()}
    if types:
        meta[META_TYPES] = json.dumps(types).encode()
    if info:
        meta[META_INFO] = json.dumps(info).encode()
    table = pa.table(cols).replace_schema_metadata(meta)
    tmp = partial / f".part-{chunk:06d}-{uuid.uuid4().hex[:8]}.tmp"
    pq.write_table(table, tmp)
    path = part_path(partial, chunk)
    os.replace(tmp, path)  # complete or absent: a SIGKILL leaves no torn part
    return path
