"""A finished output says what made it: the job's manifest (the `--resume` key: model by content, backend,
engine settings, readout and its questions or template, chunking, kept columns; loop.job_manifest) with the
sha256 of the input it read, its row and record counts and the version that wrote it.

Where it is kept (written with the joined output, store.OutputStore.close):
- Parquet: in the file's key-value metadata, under `openjev_batch.manifest` (JSON);
- JSONL, JSON, CSV, TSV: in a sidecar `OUT.manifest.json` beside the output, which also names the output's
  size and sha256, so a sidecar left beside another file is told from its own. `-o -` keeps none (the
  output was a temporary file).

`--resume` of a finished output reads it back (`confirm_finished`): the same manifest and input → nothing to
do; another job's → refused, naming what differs, as a partial of another job is.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..._version import __version__
from ...core import input_key, split_input_key
from ...errors import ConfigError, OutputFinished
from ...options import output_format
from ...values import sha256_file
from .ledger import changed
from .writers import WRITERS

KEY = b"openjev_batch.manifest"
SIDECAR = ".manifest.json"
MAX_BYTES = 16 << 20  # a manifest is a few KiB (a model's file list); a bigger file is not one of ours


def sidecar_path(output: Path) -> Path | None:
    """Where a text output keeps its manifest; None for Parquet (in the file itself: its writer carries
    metadata)."""
    if WRITERS[output_format(output)].carries_metadata:
        return None
    return output.with_name(output.name + SIDECAR)


def document(manifest: dict[str, Any], input_key: str | None, rows: int, records: int) -> dict[str, Any]:
    """What the finished output carries. `manifest`: the job's (its partial's manifest.json, job id left out:
    it names the parts, which are gone once joined); `input_key`: the resume key of the whole input
    (core.input_key), kept as the input's sha256 and, when rows name image files, `images_sha256`."""
    job = {k: v for k, v in manifest.items() if k != "job_id"}
    sha, images = split_input_key(input_key)
    return {"openjev_batch": __version__, "manifest": job, "input_sha256": sha, "rows": rows, "records": records,
            **({"images_sha256": images} if images is not None else {})}  # fmt: skip


def parquet_metadata(doc: dict[str, Any]) -> dict[bytes, bytes]:
    return {KEY: json.dumps(doc, ensure_ascii=False).encode()}


def write_sidecar(output: Path, doc: dict[str, Any], joined: Path) -> Path:
    """The sidecar of `output` describing `joined` (the output file about to be renamed into place), written
    under a temporary name (`replace_output` renames it). Returns the temporary file."""
    full = {**doc, "output": {"bytes": joined.stat().st_size, "sha256": sha256_file(joined)}}
    # beside `joined`, in the partial folder: a crash leaves it among the store's temporaries (.join-*.tmp)
    tmp = joined.with_name(f"{joined.name.removesuffix('.tmp')}-manifest.tmp")
    tmp.write_text(json.dumps(full, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return tmp


def _load_sidecar(side: Path) -> dict[str, Any] | None:
    """The sidecar's document; None when it is not one this store wrote."""
    if side.is_symlink() or not side.is_file():
        return None
    with open(side, "rb") as f:
        raw = f.read(MAX_BYTES + 1)
    try:
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except ValueError:
        return None
    ours = isinstance(doc, dict) and isinstance(doc.get("manifest"), dict) and "openjev_batch" in doc
    return doc if ours else None


def refuse_foreign_sidecar(output: Path) -> None:
    """Raise ConfigError when `OUT.manifest.json` exists and is not a manifest this store wrote (a user's
    file, a symlink, a folder): the join would replace it. Checked when a job opens its output, before any
    model loads."""
    side = sidecar_path(output)
    if side is not None and (side.exists() or side.is_symlink()) and _load_sidecar(side) is None:
        raise ConfigError(
            f"{side} exists and is not a manifest of openjev-batch; move it away, or write to another -o "
            "(it is left as it is)"
        )


def read(output: Path) -> dict[str, Any] | None:
    """The manifest document a finished `output` carries; None when there is no output or it carries none
    (written before outputs kept one, or not by openjev-batch). Raises ConfigError for a sidecar that no
    longer describes its output (the output was changed since)."""
    side = sidecar_path(output)
    if not output.is_file():
        return None
    if side is None:
        import pyarrow.parquet as pq

        try:
            doc = json.loads((pq.read_schema(output).metadata or {})[KEY])
        except Exception:  # not Parquet, no manifest, not JSON: no manifest of ours
            return None
        return doc if isinstance(doc, dict) and isinstance(doc.get("manifest"), dict) else None
    doc = _load_sidecar(side)
    if doc is None:
        return None
    seen = doc.get("output") or {}
    if seen.get("bytes") != output.stat().st_size or seen.get("sha256") != sha256_file(output):
        raise ConfigError(
            f"--resume: {output} changed since its job wrote it ({side.name} no longer describes it); "
            "rerun without --resume to replace it"
        )
    return doc


def partial_job(mpath: Path) -> str | None:
    """The job id of a partial folder's manifest.json at `mpath` (None when there is none). Raises
    ConfigError for a manifest.json this store did not write (it writes it atomically, so its own is never
    torn)."""
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


# Entries known only once the model loaded (the job amends them then): a manifest computed before the load
# lacks them, so they are compared when both have them (store.OutputStore.amend compares them at the load)
LATE = ("tokenizer",)
# Entries that say where something was read, for a person reading the manifest: its content is compared under
# another key (calibration_sha256), so the same file under another path resumes; what a job copied from
# earlier outputs (`reused`) and the key its answers were made under (`answer_job`, pipeline/reuse.py): the
# same job either way
INFO = ("calibration_file", "reused", "answer_job")


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys whose values differ between two manifests (`new` compared as JSON keeps it: tuples as
    lists), sorted; a LATE key that `new` does not have yet is not compared, an INFO key never."""
    new = json.loads(json.dumps(new))
    keys = {k for k in set(old) | set(new) if (k in new or k not in LATE) and k not in INFO}
    return sorted(k for k in keys if old.get(k) != new.get(k))


def confirm_finished(output: Path, manifest: dict[str, Any], digests: Iterable[str | None]) -> None:
    """`--resume` with no partial output to continue, against the finished `output`. Returns when it carries
    no manifest (the job then runs afresh, as before outputs kept one). Raises ConfigError when another job
    made it (naming what differs) or it was made from other input; OutputFinished when this job made it
    from this input: nothing to do. `digests`: the input's sha256 after each chunk, as a job reads it
    (source.chunks), read to its end only when the manifests agree."""
    doc = read(output)
    if doc is None:
        return
    if diff := differences(doc["manifest"], manifest):
        raise ConfigError(
            f"--resume: {output} was made by a different job (differs in: {', '.join(diff)}); rerun without "
            "--resume to replace it"
        )
    digest = (collections.deque(digests, maxlen=1) or [None])[-1]  # after the last chunk: the whole input
    then = doc.get("input_sha256")
    then = input_key(then, doc.get("images_sha256")) if isinstance(then, str) else then
    if digest != then:
        raise ConfigError(
            f"--resume: {changed(then, digest, str(output))}; rerun without --resume to replace it"
        )
    where = "its Parquet metadata" if (side := sidecar_path(output)) is None else side.name
    raise OutputFinished(
        f"{output} is finished: this job made it from this input (the manifest in {where}); nothing to do"
    )


def replace_output(joined: Path, output: Path, doc: dict[str, Any]) -> None:
    """Rename `joined` into place as `output`, and beside a text output its sidecar describing it: the old
    sidecar goes first, the new one comes last, so a crash between leaves no sidecar, never another
    output's beside this one (the partial is still there for `--resume`)."""
    side = sidecar_path(output)
    if side is None:
        os.replace(joined, output)
        return
    tmp = write_sidecar(output, doc, joined)
    try:
        side.unlink(missing_ok=True)
        os.replace(joined, output)
        os.replace(tmp, side)
    finally:
        tmp.unlink(missing_ok=True)
