"""The output store: one job's parts, manifest, lock, input ledger, resume and count checks, and the join.

    <out>.lock           flock(2)-held while a job writes <out>; holds that job's pid, host and start time
    <out>.partial/
      manifest.json      what made the parts (model, backend, engine settings, questions, …) + a job id
      chunks.jsonl       per input chunk: its rows, output records and the input's sha256 up to its end
      part-NNNNNN.parquet  one input chunk's output; its Parquet metadata names the job id and chunk, and
                         holds what the summary needs that the records do not (`part_info`: warm-up
                         and planned unique tokens), so a resumed job reports the whole job
      .part-*.tmp, .join-*.tmp  files being written (unique names, renamed into place when complete)
      ray/               `run --ray` staging (pipeline/runners/ray/staging.py)

- One job owns the folder: the lock is taken before anything in it is read or deleted, and a second job
  on the same output is refused at start, naming the holder (lock.py: a crashed job never leaves it stuck).
- Resume identifies the input by content: each chunk's entry in chunks.jsonl carries the sha256 of the
  input read so far (computed while reading, `read.read_rows(hasher=…)`), and a resumed run refuses as soon
  as the input it reads differs from what an earlier run of this job read. Size and mtime are not used
  (a touched identical copy resumes; a same-size, same-mtime edit is refused).
- The join checks that the parts are exactly chunks 0…n−1 of this run, each made by this job (the job id in
  its metadata) with the number of records this run expects for it, then concatenates them into `<out>`
  (a unique temporary name inside the folder, then an atomic rename).
- Only files the store creates are deleted or overwritten: it removes the parts whose metadata names a job
  of this output's manifest, and that job's ledger and temporaries, never the folder wholesale, so a user's
  file inside `<out>.partial/` or a user's `<out>.tmp` survives. A file with one of the store's names that
  no manifest accounts for (a user's `manifest.json`, `part-000000.parquet`), a user's own `<out>.lock`,
  and a symlink at `<out>.lock`, `<out>.partial` or `<out>.partial/ray` are refused, never deleted or
  written through (hostile trial, issue 25).
- Kept columns have one type whatever the chunking: a Parquet input's own column types; for JSONL (no
  schema) the type every value agrees on (kept_types.py), computed over all parts at the join, else JSON
  text.

Size (over the house's ~300 lines): everything that decides whether an output on disk is trustworthy —
the ledger, the manifest diff and the join's checks — is in one file, so "change how resume works" is one
place; each piece is a short function or method of `OutputStore`.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, OutputCheckError
from ..options import output_format
from .kept_types import as_text, decode_type, encode_type, unify_types, value_type
from .lock import acquire, lock_path, same_file
from .write import TableWriter

MANIFEST, LEDGER = "manifest.json", "chunks.jsonl"
STAGE_DIR = "ray"  # `run --ray` staging, under <out>.partial/
_META_JOB, _META_CHUNK, _META_TYPES = b"openjev.job", b"openjev.chunk", b"openjev.kept_types"
_META_INFO = b"openjev.info"
_OWN_STAGE_GLOBS = ("r[0-9]*-[0-9]*.parquet", "r[0-9]*-[0-9]*.tmp")


def part_info(part: pa.Table) -> dict[str, int]:
    """The numbers a part's chunk kept in its metadata (`OutputStore.write(info=…)`); {} for a part written
    without them (by an older version)."""
    try:
        return {str(k): int(v) for k, v in json.loads((part.schema.metadata or {})[_META_INFO]).items()}
    except (KeyError, ValueError, TypeError, AttributeError):
        return {}


# -- the lock --------------------------------------------------------------------------------------------
def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".part-{path.name}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class OutputStore:
    """Writes one job's results chunk by chunk under ``<out>.partial/`` so it can be resumed, and makes
    ``<out>`` appear only when complete (see the module docstring for the layout and the guarantees).

    Use: `begin_chunk(i, …)` for every input chunk as it is read (records, or on resume checks, the
    input hash), `done(i)` / `write(i, records)`, then `close()`; `release()` (or the context manager)
    drops the lock on every path. Raises OutputBusyError when another job holds the output, ConfigError
    when resuming a partial made by a different job or from a different input.
    """

    def __init__(
        self,
        path: str | Path,
        keep: tuple[str, ...] = (),
        manifest: dict | None = None,
        resume: bool = False,
        kept_types: dict[str, pa.DataType] | None = None,
        schema: pa.Schema | None = None,
    ):
        if schema is None:
            from ..readouts.label_logprobs import OUTPUT_SCHEMA as schema
        self.schema = schema  # the readout's columns
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.keep = keep
        self.kept_types = kept_types  # None: JSONL (types decided at the join)
        self.rows_written = 0
        if self.partial.is_symlink() or (self.partial / STAGE_DIR).is_symlink():
            link = self.partial if self.partial.is_symlink() else self.partial / STAGE_DIR
            # the store deletes its own names inside it: through a link they would be another folder's files
            raise ConfigError(
                f"{link} is a symbolic link; remove it (the store writes only into a folder of its own)"
            )
        if self.partial.exists() and not self.partial.is_dir():
            raise ConfigError(f"{self.partial} exists and is not a folder; move it away")
        self._fd: int | None = acquire(self.path)
        made = not self.partial.exists()
        try:
            self.partial.mkdir(parents=True, exist_ok=True)
            self._open({**(manifest or {}), "keep": list(keep)}, resume)
        except BaseException:
            if same_file(lock := lock_path(self.path), self._fd):  # refused: leave nothing behind
                lock.unlink(missing_ok=True)
            if made:
                _rmdir_if_empty(self.partial)
            self.release()
            raise

    # -- opening -------------------------------------------------------------------------------------
    def _open(self, manifest: dict, resume: bool) -> None:
        mpath = self.partial / MANIFEST
        self.ledger: dict[int, dict] = {}
        if resume and mpath.exists():
            try:
                old = json.loads(mpath.read_text())
            except (OSError, ValueError):
                old = {}
            job = old.pop("job_id", None) if isinstance(old, dict) else None
            if old != manifest or not job:
                old = old if isinstance(old, dict) else {}
                diff = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
                raise ConfigError(
                    f"--resume: {self.partial} was made by a different job (differs in: "
                    f"{', '.join(diff) or 'job id'}); delete it or rerun without --resume"
                )
            self.job_id = job
            self.ledger = self._read_ledger()
            self._remove_temporaries()  # left by a killed run of this job
        else:
            old_job = self._manifest_job()
            self._refuse_foreign(old_job)  # before anything is deleted
            self._remove_own_files(old_job, manifest=False)  # the manifest is replaced, atomically
            self.job_id = uuid.uuid4().hex
            _atomic_write(mpath, json.dumps({**manifest, "job_id": self.job_id}).encode())
        self._seen = 0

    def _manifest_job(self) -> str | None:
        """The job id of the folder's manifest.json (None when there is none). Raises ConfigError for a
        manifest.json this store did not write (it writes it atomically, so its own is never torn)."""
        mpath = self.partial / MANIFEST
        if not mpath.exists() and not mpath.is_symlink():
            return None
        try:
            job = json.loads(mpath.read_bytes()).get("job_id") if not mpath.is_symlink() else None
        except (OSError, ValueError, AttributeError):
            job = None
        if not isinstance(job, str) or not job:
            raise ConfigError(
                f"{mpath} was not written by openjev-batch; move it away, or write to another -o "
                "(it is left as it is)"
            )
        return job

    def _part_job(self, p: Path) -> str | None:
        """The job id in part `p`'s metadata (None: not a part of this store)."""
        try:
            return self._part_meta(p).get(_META_JOB, b"").decode() or None
        except Exception:  # not Parquet, unreadable: a file the store did not write
            return None

    def _refuse_foreign(self, job: str | None) -> None:
        """Raise ConfigError naming the files with the store's names (parts, ledger, Ray staging) that job
        `job` did not make: a fresh run would have to delete or overwrite them (hostile trial, issue 25:
        a user's files named so were deleted)."""
        foreign = [
            p.name
            for p in sorted(self.partial.glob("part-[0-9]*.parquet"))
            if job is None or self._part_job(p) != job
        ]
        stage = self.partial / STAGE_DIR
        if job is None:
            led = self.partial / LEDGER
            foreign += [LEDGER] if led.exists() or led.is_symlink() else []
            if stage.is_dir():
                foreign += [f"{STAGE_DIR}/{p.name}" for g in _OWN_STAGE_GLOBS for p in sorted(stage.glob(g))]
        if foreign:
            raise ConfigError(
                f"{self.partial} holds {', '.join(foreign[:3])}{' …' if len(foreign) > 3 else ''}, which no "
                "earlier run of this output wrote; move them away, or write to another -o (nothing was changed)"
            )

    def _remove_temporaries(self) -> None:
        for pattern in (".part-*.tmp", ".join-*.tmp"):
            for tmp in self.partial.glob(pattern):
                tmp.unlink(missing_ok=True)

    def amend(self, key: str, value: Any) -> None:
        """Set one entry of this job's manifest, atomically: a value known only once the model loaded (a
        hub id's revision, downloaded by the loader), so the key a resume computes matches it."""
        mpath = self.partial / MANIFEST
        m = json.loads(mpath.read_bytes())
        if m.get(key) != value:
            _atomic_write(mpath, json.dumps({**m, key: value}).encode())

    def _read_ledger(self) -> dict[int, dict]:
        out: dict[int, dict] = {}
        p = self.partial / LEDGER
        if p.exists():
            for line in p.read_text().splitlines():
                try:
                    e = json.loads(line)
                    out[int(e["chunk"])] = e
                except (ValueError, KeyError, TypeError):  # a line torn by a kill: that chunk reruns
                    continue
        return out

    def _remove_own_files(self, job: str | None, manifest: bool = True) -> None:
        """Delete what job `job` wrote here: its parts (by the job id in their metadata) and, as the folder
        is then its (its manifest names it), the ledger, temporaries and Ray staging; the manifest last, so
        a kill midway leaves a folder that still says whose files it holds. Nothing for `job` None."""
        if job is None:
            return
        for p in self.partial.glob("part-[0-9]*.parquet"):
            if self._part_job(p) == job:
                p.unlink(missing_ok=True)
        stage = self.partial / STAGE_DIR
        if stage.is_dir() and not stage.is_symlink():
            for pattern in _OWN_STAGE_GLOBS:
                for p in stage.glob(pattern):
                    p.unlink(missing_ok=True)
            _rmdir_if_empty(stage)
        self._remove_temporaries()
        (self.partial / LEDGER).unlink(missing_ok=True)
        with contextlib.suppress(ConfigError):  # a manifest that is no longer this job's stays
            if manifest and self._manifest_job() == job:
                (self.partial / MANIFEST).unlink(missing_ok=True)

    # -- per chunk -----------------------------------------------------------------------------------
    def begin_chunk(self, chunk: int, rows: int, records: int, input_sha256: str) -> None:
        """Record (or, resuming, check) input chunk `chunk`: its rows, the output records it must give,
        and the sha256 of the input read up to its end. Raises ConfigError when an earlier run of this job
        read different input there (the partial cannot be resumed with this input)."""
        entry = {"chunk": chunk, "rows": rows, "records": records, "input_sha256": input_sha256}
        self._seen = max(self._seen, chunk + 1)
        old = self.ledger.get(chunk)
        if old == entry:
            return
        if old is not None:
            raise ConfigError(
                f"--resume: the input changed since {self.partial} was written (its content differs at "
                f"input chunk {chunk} or before: sha256 {old['input_sha256'][:12]}… then, "
                f"{input_sha256[:12]}… now); delete it or rerun without --resume"
            )
        self.ledger[chunk] = entry
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # never through a link
        with os.fdopen(os.open(self.partial / LEDGER, flags, 0o644), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def part(self, chunk: int) -> Path:
        return self.partial / f"part-{chunk:06d}.parquet"

    def _part_meta(self, p: Path) -> dict[bytes, bytes]:
        return pq.read_schema(p).metadata or {}

    def _owned(self, chunk: int) -> bool:
        p = self.part(chunk)
        if not p.exists() or chunk not in self.ledger:
            return False
        meta = self._part_meta(p)
        return meta.get(_META_JOB) == self.job_id.encode() and meta.get(_META_CHUNK) == str(chunk).encode()

    def is_done(self, chunk: int) -> bool:
        """Whether `chunk` has a finished part of this job for the input read now (call after begin_chunk)."""
        return self._owned(chunk)

    def done(self, chunk: int) -> pa.Table | None:
        """The finished part of `chunk` (resume), or None."""
        return pq.read_table(self.part(chunk)) if self._owned(chunk) else None

    def write(self, chunk: int, records: list[dict[str, Any]], info: dict[str, int] | None = None) -> None:
        """Write chunk `chunk`'s part. `info`: the chunk's numbers that are not in its records (warm-up
        tokens, planned unique tokens), kept in the part's metadata for the summary of a resumed job."""
        cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in self.schema}
        types: dict[str, str | None] = {}
        for k in self.keep:
            vals = [r[k] for r in records]
            if self.kept_types is not None:  # Parquet input: its own column type
                cols[k] = pa.array(vals, type=self.kept_types[k])
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
        meta = {_META_JOB: self.job_id.encode(), _META_CHUNK: str(chunk).encode()}
        if types:
            meta[_META_TYPES] = json.dumps(types).encode()
        if info:
            meta[_META_INFO] = json.dumps(info).encode()
        table = pa.table(cols).replace_schema_metadata(meta)
        tmp = self.partial / f".part-{chunk:06d}-{uuid.uuid4().hex[:8]}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.part(chunk))  # complete or absent: a SIGKILL leaves no torn part
        self.rows_written += len(records)

    # -- the join ------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise OutputCheckError unless the parts are exactly this run's chunks 0…n−1, each of this job and
        with the records its chunk needs (the count check); ConfigError when an earlier run read more
        input than this one (the input shrank)."""
        n = self._seen
        if extra := sorted(c for c in self.ledger if c >= n):
            raise ConfigError(
                f"--resume: the input changed since {self.partial} was written (it ends before input chunk "
                f"{extra[0]}, which an earlier run read); delete it or rerun without --resume"
            )
        want = {self.part(i).name for i in range(n)}
        have = {p.name for p in self.partial.glob("part-[0-9]*.parquet")}
        need = sum(self.ledger[i]["records"] for i in range(n))
        rows = sum(self.ledger[i]["rows"] for i in range(n))
        if have != want:
            odd = sorted(have - want)[:3] + sorted(want - have)[:3]
            raise OutputCheckError(
                f"count check failed: {rows} input rows need {need} output rows in {n} parts, the partial "
                f"output has {len(have)} parts (not matching: {', '.join(odd)}); "
                f"delete {self.partial.name} and rerun"
            )
        for i in range(n):
            p = self.part(i)
            meta = self._part_meta(p)
            if meta.get(_META_JOB) != self.job_id.encode() or meta.get(_META_CHUNK) != str(i).encode():
                raise OutputCheckError(
                    f"{p} was not written by this job (its job id or chunk differs from the manifest); "
                    f"delete {self.partial.name} and rerun"
                )
            got = pq.read_metadata(p).num_rows
            if got != self.ledger[i]["records"]:
                raise OutputCheckError(
                    f"count check failed: input chunk {i} needs {self.ledger[i]['records']} output rows, "
                    f"{p.name} has {got}; delete {self.partial.name} and rerun"
                )

    def _final_types(self, parts: list[Path]) -> dict[str, pa.DataType | None]:
        if self.kept_types is not None:
            return dict(self.kept_types)
        out: dict[str, pa.DataType | None] = dict.fromkeys(self.keep, pa.null())
        for p in parts:
            types = json.loads(self._part_meta(p).get(_META_TYPES, b"{}"))
            for k in self.keep:
                out[k] = unify_types(out[k], decode_type(types.get(k)))
        return out  # None: no common type (text)

    def close(self) -> Path:
        """Check the parts (`check`), join them in chunk order into the target path (atomically), remove
        the store's files and the lock. Returns the path."""
        self.check()
        parts = [self.part(i) for i in range(self._seen)]
        final = self._final_types(parts)
        fields = list(self.schema)
        for k in self.keep:
            t = final[k]
            fields.append(pa.field(k, pa.string() if t is None or pa.types.is_null(t) else t))
        schema = pa.schema(fields)
        tmp = self.partial / f".join-{uuid.uuid4().hex[:8]}.tmp"
        try:
            self._join(parts, tmp, schema, final)
            os.replace(tmp, self.path)
        except BaseException:  # a full disk, an output that cannot be replaced: no half-joined file left
            tmp.unlink(missing_ok=True)
            raise
        self._remove_own_files(self.job_id)
        self.release(remove=True)
        return self.path

    def _join(self, parts: list[Path], tmp: Path, schema: pa.Schema, final: dict) -> None:
        with TableWriter(tmp, schema, output_format(self.path)) as w:
            for p in parts:
                t = pq.read_table(p)
                cols = [t.column(f.name) for f in self.schema]
                for k in self.keep:
                    c = t.column(k)
                    if self.kept_types is None:  # JSON text → the column's type, or text when none
                        vals = [None if s is None else json.loads(s) for s in c.to_pylist()]
                        if final[k] is None:
                            c = pa.array([as_text(v) for v in vals], pa.string())
                        else:
                            c = pa.array(vals, type=schema.field(k).type)
                    cols.append(c)
                w.write_table(pa.Table.from_arrays(cols, schema=schema))

    def abandon(self) -> None:
        """The job ends without output: keep the partial for `--resume` if it holds a part (or rows the Ray
        runner staged), else remove the
        store's files and folder (nothing to resume, e.g. the model did not load) and release the lock."""
        if self._fd is not None and not self._holds_results():
            self._remove_own_files(self.job_id)
            self.release(remove=True)
        self.release()

    def _holds_results(self) -> bool:
        """A finished part, or rows the Ray runner staged (its crash safety within a chunk)."""
        stage = self.partial / STAGE_DIR
        staged = stage.is_dir() and any(stage.glob(_OWN_STAGE_GLOBS[0]))
        return staged or any(self.partial.glob("part-[0-9]*.parquet"))

    def release(self, remove: bool = False) -> None:
        """Drop the lock (idempotent). `remove`: also delete the lock file and the folder if it is empty
        (done while still holding the lock; see `_acquire` for why that is safe)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove and same_file(lock := lock_path(self.path), fd):  # only the lock this job holds
            lock.unlink(missing_ok=True)
            _rmdir_if_empty(self.partial)
        os.close(fd)  # closing the last fd drops the flock

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.abandon() if exc_type is not None else self.release()


def _rmdir_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:  # not empty: holds files the store did not create
        pass
