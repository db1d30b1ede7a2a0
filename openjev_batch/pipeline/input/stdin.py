"""Standard input (`-`), or a pipe given by name (a FIFO, a shell's `<(zcat …)`), as an input file: copied
to a folder and named by its sniffed format, so every reader (formats/) works on it unchanged (they open
the input more than once: row count, columns, chunks; a pipe read again hung)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

from ...errors import InputFileError

_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


# Disk kept free while standard input is copied: `validate - < /dev/zero` filled a 70 GB disk (the hostile
# trial), starving every other process on the machine before its own ENOSPC. Checked every CHECK_BYTES. The
# reserve is 5 % (at least 1 GiB), but never more than half of what was free when the copy began: a TMPDIR
# with under 1 GiB free refused every input, however small (issue 34.18).
RESERVE_FRACTION, RESERVE_MIN, CHECK_BYTES = 0.05, 1 << 30, 64 << 20
RESERVE_OF_FREE = 0.5


def _copy_leaving_room(src, f, folder: Path, what: str) -> None:
    """Copy `src` into `f` in 1 MiB pieces; raise InputFileError before the folder's disk has less free
    than the reserve (5 %, at least 1 GiB; at most half of what was free at the start)."""
    since = CHECK_BYTES  # check before the first piece too
    reserve = None
    while piece := src.read(1 << 20):
        if since >= CHECK_BYTES:
            since = 0
            du = shutil.disk_usage(folder)
            if reserve is None:
                reserve = min(max(RESERVE_MIN, int(du.total * RESERVE_FRACTION)), int(du.free * RESERVE_OF_FREE))
            if du.free - len(piece) < reserve:
                raise InputFileError(
                    f"{what} would fill the disk of {folder.parent} (stopped after "
                    f"{f.tell():,} bytes, {du.free:,} bytes free): give the file by its path, or set TMPDIR "
                    "to a folder with room"
                )
        f.write(piece)
        since += len(piece)


def spool_stdin(folder: str | Path, stream=None, name: str = "-") -> Path:
    """Copy standard input into `folder` under a name whose extension is its sniffed format (Parquet magic →
    .parquet, `[` → .json, `{` → .jsonl, anything else → .csv; a UTF-8 byte-order mark skipped; gzip / zstd
    magic → the same, of the decompressed head, with .gz / .zst). Returns the path. Raises InputFileError
    for empty input; OSError when `folder` cannot take the copy. `name`: what the user gave (`-`, or the
    pipe's path), for messages."""
    import sys

    src = stream if stream is not None else sys.stdin.buffer
    what = "-: standard input" if name == "-" else f"{name}: the pipe"
    tmp = Path(folder) / "stdin.tmp"
    try:
        with open(tmp, "wb") as f:
            _copy_leaving_room(src, f, Path(folder), what)
    except InputFileError:
        tmp.unlink(missing_ok=True)
        raise
    with open(tmp, "rb") as f:
        head = f.read(4096)
    compression = next((c for m, c in _MAGIC.items() if head.startswith(m)), None)
    if compression is not None:  # gzip on stdin was parsed as CSV (issue 25)
        try:
            with pa.input_stream(str(tmp), compression=compression) as z:
                head = z.read(4096)
        except (OSError, pa.ArrowException) as e:
            raise InputFileError(f"{what} starts like {compression} but does not decompress: {e}") from None
    head = head.removeprefix(b"\xef\xbb\xbf")  # a BOM was sniffed as CSV (issue 25)
    if not head.strip():
        raise InputFileError(f"{what} is empty")
    if head[:4] == b"PAR1":
        if compression:
            raise InputFileError(f"{name}: a {compression}-compressed Parquet file; pipe it decompressed")
        return tmp.rename(tmp.with_name("stdin.parquet"))
    ext = {b"[": ".json", b"{": ".jsonl"}.get(head.lstrip()[:1], ".csv")
    return tmp.rename(tmp.with_name("stdin" + ext + {"gzip": ".gz", "zstd": ".zst", None: ""}[compression]))
