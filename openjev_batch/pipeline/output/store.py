"""The output store: one job's partial output folder, from the lock to the joined output.

    <out>.lock           flock(2)-held while a job writes <out>; its pid, host and start time (lock.py)
    <out>.partial/
      manifest.json      what made the parts (model, backend, engine settings, questions, …) + a job id
      chunks.jsonl       per input chunk: rows, records, the input's sha256 up to its end (ledger.py)
      part-NNNNNN.parquet  one input chunk's output, its metadata naming the job id and chunk (parts.py)
      .part-*.tmp, .join-*.tmp  files being written (unique names, renamed into place when complete)
      ray/               `run --ray` staging (pipeline/runners/ray/staging.py)
    <out>                the parts joined after the count check (join.py), with the manifest in its
    <out>.manifest.json  Parquet metadata or, beside a text output, in this sidecar (manifest.py)

This module owns the folder: who may open it, what resuming it means, and what it may delete.
- One job owns the folder: the lock is taken before anything in it is read or deleted (a second job on the
  same output is refused at start, naming the holder).
- `--resume` continues a partial of the same manifest only (else refused, naming what differs), checking
  the input chunk by chunk (ledger.py). With no partial, a finished output of the same job and input is
  left as it is (nothing to do), one of another job refused (`check_finished`).
- Only files the store creates are deleted or overwritten: it removes the parts whose metadata names a job
  of this output's manifest, and that job's ledger and temporaries, never the folder wholesale, so a user's
  file inside `<out>.partial/` or a user's `<out>.tmp` survives. A file with one of the store's names that
  no manifest accounts for (a user's `manifest.json`, `part-000000.parquet`, `<out>.manifest.json`), a
  user's own `<out>.lock`, and a symlink at `<out>.lock`, `<out>.partial` or `<out>.partial/ray` are
  refused, never deleted or written through (hostile trial, issue 25).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import ConfigError, OutputCheckError, OutputGoneError
from ...options import output_format
from ...readouts import default_readout
from . import manifest as output_manifest
from .join import Join, check_parts
from .ledger import LEDGER, Ledger
from .lock import acquire, lock_path, same_file
from .parts import PART_GLOB, atomic_write, made_by, part_info, part_job, part_path, readable_part, write_part

__all__ = ["LEDGER", "MANIFEST", "STAGE_DIR", "OutputStore", "part_info"]  # part_info: loop, Ray runner

MANIFEST = "manifest.json"
STAGE_DIR = "ray"  # `run --ray` staging, under <out>.partial/
_OWN_STAGE_GLOBS = ("r[0-9]*-[0-9]*.parquet", "r[0-9]*-[0-9]*.tmp")


class OutputStore:
    """Writes one job's results chunk by chunk under ``<out>.partial/`` so it can be resumed, and makes
    ``<out>`` appear only when complete (see the module docstring for the layout and the guarantees).

    Use: with `--resume`, `check_finished(digests)` first; `begin_chunk(i, …)` for every input chunk as it
    is read, `done(i)` / `write(i, records)`, then `close()`; `release()` (or the context manager)
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
        if schema is None:  # the default readout's columns
            schema = default_readout().schema
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
            output_manifest.refuse_foreign_sidecar(self.path)
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
        self.manifest, self._resume = manifest, resume
        self.continued = resume and mpath.exists()  # a partial of this job is continued
        if self.continued:
            try:
                old = json.loads(mpath.read_text())
            except (OSError, ValueError):
                old = {}
            old = old if isinstance(old, dict) else {}
            job = old.pop("job_id", None)
            if (diff := output_manifest.differences(old, manifest)) or not job:
                raise ConfigError(
                    f"--resume: {self.partial} was made by a different job (differs in: "
                    f"{', '.join(diff) or 'job id'}); delete it or rerun without --resume"
                )
            self.job_id = job
            self.ledger = Ledger.read(self.partial)
            self._remove_temporaries()  # left by a killed run of this job
        else:
            old_job = output_manifest.partial_job(self.partial / MANIFEST)
            self._refuse_foreign(old_job)  # before anything is deleted
            self._remove_own_files(old_job, manifest=False)  # the manifest is replaced, atomically
            self.job_id = uuid.uuid4().hex
            self.ledger = Ledger(self.partial)
            atomic_write(mpath, json.dumps({**manifest, "job_id": self.job_id}).encode())

    def check_finished(self, digests: Iterable[str | None]) -> None:
        """`--resume` with no partial to continue: the finished `<out>`, if it carries a manifest, is this
        job's from this input (raises OutputFinished: nothing to do) or refused (ConfigError naming what
        differs); returns when there is no finished output of a known job (the job runs). `digests`: the
        input's sha256 after each chunk (source.chunks), read only when the manifests agree."""
        if self._resume and not self.continued:
            output_manifest.confirm_finished(self.path, self.manifest, digests)

    def _refuse_foreign(self, job: str | None) -> None:
        """Raise ConfigError naming the files with the store's names (parts, ledger, Ray staging) that job
        `job` did not make: a fresh run would have to delete or overwrite them (hostile trial, issue 25:
        a user's files named so were deleted)."""
        foreign = [p.name for p in sorted(self.partial.glob(PART_GLOB)) if job is None or part_job(p) != job]
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
        if self.continued and key in output_manifest.LATE and key in m and m[key] != value:
            raise ConfigError(
                f"--resume: {self.partial} was made with {key} {m[key]!r}, this run loads {value!r} (another "
                "transformers?); delete it or rerun without --resume"
            )
        self.manifest = {**self.manifest, key: value}
        if m.get(key) != value:
            atomic_write(mpath, json.dumps({**m, key: value}).encode())

    def _remove_own_files(self, job: str | None, manifest: bool = True) -> None:
        """Delete what job `job` wrote here: its parts (by the job id in their metadata) and, as the folder
        is then its (its manifest names it), the ledger, temporaries and Ray staging; the manifest last, so
        a kill midway leaves a folder that still says whose files it holds. Nothing for `job` None."""
        if job is None:
            return
        for p in self.partial.glob(PART_GLOB):
            if part_job(p) == job:
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
            if manifest and output_manifest.partial_job(self.partial / MANIFEST) == job:
                (self.partial / MANIFEST).unlink(missing_ok=True)

    # -- per chunk -----------------------------------------------------------------------------------
    def begin_chunk(self, chunk: int, rows: int, records: int, input_sha256: str) -> None:
        """Record (or, resuming, check) input chunk `chunk` in the ledger (Ledger.begin: ConfigError when
        an earlier run of this job read different input there)."""
        self.ledger.begin(chunk, rows, records, input_sha256)

    def part(self, chunk: int) -> Path:
        return part_path(self.partial, chunk)

    def is_done(self, chunk: int) -> bool:
        """Whether `chunk` has a finished part of this job for the input read now (call after begin_chunk)."""
        p = self.part(chunk)
        with readable_part(p):
            return p.exists() and chunk in self.ledger and made_by(p, self.job_id, chunk)

    def done(self, chunk: int) -> pa.Table | None:
        """The finished part of `chunk` (resume), or None."""
        with readable_part(self.part(chunk)):
            return pq.read_table(self.part(chunk)) if self.is_done(chunk) else None

    def write(self, chunk: int, records: list[dict[str, Any]], info: dict[str, int] | None = None) -> None:
        """Write chunk `chunk`'s part. `info`: the chunk's numbers that are not in its records (warm-up
        tokens, planned unique tokens), kept in the part's metadata for the summary of a resumed job."""
        write_part(self.partial, chunk, self.job_id, records, self.schema, self.keep, self.kept_types, info)
        self.rows_written += len(records)

    # -- the join ------------------------------------------------------------------------------------
    def check(self) -> None:
        """Raise OutputCheckError unless the parts are exactly this run's chunks 0…n−1, each of this job and
        with the records its chunk needs (the count check); ConfigError when an earlier run read more
        input than this one (the input shrank)."""
        self.ledger.check_not_shrunk()
        check_parts(self.partial, self.ledger, self.job_id)

    def close(self) -> Path:
        """Check the parts (`check`), join them in chunk order into the target path (atomically) with the
        job's manifest (manifest.py), remove the store's files and the lock. Returns the path."""
        self.check()
        join = Join([self.part(i) for i in range(self.ledger.seen)], self.schema, self.keep, self.kept_types)
        rows, records = self.ledger.totals()
        doc = output_manifest.document(self.manifest, self.ledger.input_sha256(), rows, records)
        fmt = output_format(self.path)
        tmp = self.partial / f".join-{uuid.uuid4().hex[:8]}.tmp"
        try:
            join.write(tmp, fmt, output_manifest.parquet_metadata(doc))  # a text format's writer ignores it
            output_manifest.replace_output(tmp, self.path, doc)
        except BaseException:  # a full disk, an output that cannot be replaced: no half-joined file left
            tmp.unlink(missing_ok=True)
            raise
        self._remove_own_files(self.job_id)
        self.release(remove=True)
        return self.path

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
        return staged or any(self.partial.glob(PART_GLOB))

    def release(self, remove: bool = False) -> None:
        """Drop the lock (idempotent). `remove`: also delete the lock file and the folder if it is empty
        (done while still holding the lock; see lock.acquire for why that is safe)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove and same_file(lock := lock_path(self.path), fd):  # only the lock this job holds
            lock.unlink(missing_ok=True)
            _rmdir_if_empty(self.partial)
        os.close(fd)  # closing the last fd drops the flock

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.abandon() if exc_type is not None else self.release()
        # a write into a folder someone removed fails as pyarrow's or the OS's message naming a temporary
        # file, or as a count check over no parts (issue 34.18); say what happened, naming the folder
        if isinstance(exc, (OSError, OutputCheckError)) and not self.partial.is_dir():
            raise OutputGoneError(_gone(self.partial)) from exc


def _gone(partial: Path) -> str:
    missing = [p for p in partial.parents if not p.is_dir()]  # the nearest first: name the highest
    where = f"the output's folder {missing[-1]}" if missing else partial
    return f"{where} was removed while the job ran; its finished chunks are gone: rerun the job"


def _rmdir_if_empty(p: Path) -> None:
    try:
        p.rmdir()
    except OSError:  # not empty: holds files the store did not create
        pass
