"""Answer keys: when an answer can be copied instead of computed (`run --reuse PREVIOUS`).

A row's answer key is the sha256 of two things: the job's answer manifest and the row's content.
- The answer manifest is the job's `--resume` manifest (loop.job_manifest: the model by content, backend,
  dtype and every engine option that changes a number, the readout's key: questions by content, system
  prompt, calibration, debias order, prompt layout) without what changes no number (`NOT_ANSWERS`: chunking,
  `--limit`, the kept columns). One function makes both, so an option added to the resume key is in the
  answer key too.
- The row's content is the parsed row as the model gets it: its id, text or messages, its own questions, and
  its images by the sha256 of their bytes (a file's too), never its position or kept columns.

Every output stores each record's key (the `answer_key` column); a later job copies a row's records from an
earlier output holding its key (output/previous.py), computes the others, and puts both back in input order
(`ChunkPlan`). A row error has no key: it is never copied (nor costs model work)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..core import ANSWER_KEY, RowError
from ..readouts.base import Readout
from .output import manifest as output_manifest
from .output.previous import Previous
from .output.write import job_schema

# manifest entries that change no number: a row answered under other chunking, limit or kept columns is
# the same answer (INFO: the files a job copied from, the job key itself).
NOT_ANSWERS = ("chunk_rows", "limit", "keep", "job_id", *output_manifest.LATE, *output_manifest.INFO)
# in the key by content per row (a row holds its questions, shared or its own), so a file's and the API's
# mapping of the same questions key alike; an earlier output of other questions is still refused by name
_PER_ROW = ("questions_sha256",)
_DROP_FIELDS = ("pos", "kept")  # a row's place in its input and its kept values change no answer


def answer_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The entries of a job's manifest that change a number."""
    return {k: v for k, v in manifest.items() if k not in NOT_ANSWERS}


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The entries of two job manifests that differ in what changes a number (output/manifest.differences)."""
    return output_manifest.differences(answer_manifest(old), answer_manifest(new))


def job_key(manifest: dict[str, Any]) -> str:
    """The sha256 of a job's answer manifest (as JSON keeps it: tuples as lists)."""
    keyed = {k: v for k, v in answer_manifest(json.loads(json.dumps(manifest))).items() if k not in _PER_ROW}
    text = json.dumps(keyed, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def row_key(job: str, row: Any) -> str | None:
    """A row's answer key under job key `job`; None for a row error (never copied)."""
    if isinstance(row, RowError):
        return None
    text = json.dumps(_canon(row), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(f"{job}\n{text}".encode()).hexdigest()[:32]  # 128 bits: no collision in any table


def _canon(v: Any) -> Any:
    """A parsed row as plain JSON values: dataclasses by field (name and type), an image by its bytes'
    sha256, bytes by theirs; a mapping keeps its order (a JSON record rendered as text keeps it too)."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        if hasattr(v, "sha256") and hasattr(v, "read_bytes"):  # images.ImageRef: by content, not path
            return {"image": v.sha256}
        fields = {f.name: _canon(getattr(v, f.name)) for f in dataclasses.fields(v) if f.name not in _DROP_FIELDS}
        return {type(v).__name__: fields}
    if isinstance(v, dict):
        return [[str(k), _canon(x)] for k, x in v.items()]
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    if isinstance(v, bytes):
        return {"bytes": hashlib.sha256(v).hexdigest()}
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return repr(v)


@dataclass
class ChunkPlan:
    """One input chunk under answer keys: its rows, their keys, and the records copied for each row (None:
    computed). `todo` goes to the runner; `merge` puts its records and the copied ones back in input order."""

    readout: Readout
    rows: list
    keys: list[str | None]
    copied: list[list[dict[str, Any]] | None] = field(default_factory=list)

    @property
    def todo(self) -> list:
        return [r for r, c in zip(self.rows, self.copied, strict=True) if c is None]

    @property
    def reused_rows(self) -> int:
        return sum(c is not None for c in self.copied)

    def merge(self, computed: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every row's records in input order, each carrying its row's answer key: a copied row's with this
        row's id and kept values, a computed row's from `computed` (the runner's records of `todo`)."""
        out: list[dict[str, Any]] = []
        at = 0
        for row, key, copy in zip(self.rows, self.keys, self.copied, strict=True):
            if copy is None:
                n = self.readout.n_records(row)
                recs, at = computed[at : at + n], at + n
            else:
                recs = [{**r, "id": row.id, **{k: row.kept.get(k) for k in self.readout.keep}} for r in copy]
            for r in recs:
                r[ANSWER_KEY] = key
            out.extend(recs)
        return out

    def info(self) -> dict[str, int]:
        """The copied rows' numbers, kept in the part's metadata: their rows and records, and their tokens,
        which the summary does not count as this job's work (summary.Totals.add)."""
        copied = [r for c in self.copied if c is not None for r in c]
        if not copied:
            return {}
        t = self.readout.tokens(pa.Table.from_pylist(copied, schema=self.readout.schema))
        return {"reused_rows": self.reused_rows, "reused_records": len(copied),
                **{f"reused_{k}": v for k, v in t.items()}}  # fmt: skip


class Keys:
    """A job's answer keys (`manifest`: its job manifest; `device`: the device as resolved, for `auto` on
    a GPU machine is not `auto` on a CPU one) and the earlier outputs it copies from (`previous`: paths or
    tables; none: the keys are only written). `job`, the job key, goes into the output's manifest
    (`answer_job`)."""

    def __init__(self, manifest: dict[str, Any], readout: Readout, previous: Any = (), device: str | None = None):
        # the key on the device as resolved; an earlier manifest is compared as written (`auto` to `auto`)
        self.job, self.readout = job_key({**manifest, **({"device": device} if device else {})}), readout
        schema = job_schema(readout.schema)
        self.previous = Previous(previous, manifest, schema, self._refuse) if previous else None

    def _refuse(self, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """Why an earlier output's manifest `old` is not this job's kind (empty: it is): the entries that
        differ, or, where only the resolved device does (`auto` on another machine), that. Of the same job
        key, one of other shared questions (keyed per row, so none of its rows would match) is said too."""
        diff = differences(old, new)
        if old.get("answer_job") == self.job:
            return [d for d in diff if d in _PER_ROW]
        return diff or ["the device it ran on"]

    def plan(self, chunk: list) -> ChunkPlan:
        keys = [row_key(self.job, r) for r in chunk]
        p = ChunkPlan(self.readout, chunk, keys)
        take = self.previous.take if self.previous is not None else None
        p.copied = [take(k, self.readout.n_records(r)) if take else None for r, k in zip(chunk, keys, strict=True)]
        return p

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.previous.notes) if self.previous is not None else ()

    @property
    def files(self) -> list[dict[str, Any]]:
        return self.previous.files if self.previous is not None else []

