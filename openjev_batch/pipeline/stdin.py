"""Standard input (`-`) as an input file: copied to a folder and named by its sniffed format, so every reader
(formats.py) works on it unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa

from ..errors import InputFileError

_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


def spool_stdin(folder: str | Path, stream=None) -> Path:
    """Copy standard input into `folder` under a name whose extension is its sniffed format (Parquet magic →
    .parquet, `[` → .json, `{` → .jsonl, anything else → .csv; a UTF-8 byte-order mark skipped; gzip / zstd
    magic → the same, of the decompressed head, with .gz / .zst). Returns the path. Raises InputFileError
    for empty input; OSError when `folder` cannot take the copy."""
    import sys

    src = stream if stream is not None else sys.stdin.buffer
    tmp = Path(folder) / "stdin.tmp"
    with open(tmp, "wb") as f:
        shutil.copyfileobj(src, f, 1 << 20)
    with open(tmp, "rb") as f:
        head = f.read(4096)
    compression = next((c for m, c in _MAGIC.items() if head.startswith(m)), None)
    if compression is not None:  # gzip on stdin was parsed as CSV (issue 25)
        try:
            with pa.input_stream(str(tmp), compression=compression) as z:
                head = z.read(4096)
        except (OSError, pa.ArrowException) as e:
            raise InputFileError(
                f"-: standard input starts like {compression} but does not decompress: {e}"
            ) from None
    head = head.removeprefix(b"\xef\xbb\xbf")  # a BOM was sniffed as CSV (issue 25)
    if not head.strip():
        raise InputFileError("-: standard input is empty")
    if head[:4] == b"PAR1":
        if compression:
            raise InputFileError(f"-: a {compression}-compressed Parquet file; pipe it decompressed")
        return tmp.rename(tmp.with_name("stdin.parquet"))
    ext = {b"[": ".json", b"{": ".jsonl"}.get(head.lstrip()[:1], ".csv")
    return tmp.rename(tmp.with_name("stdin" + ext + {"gzip": ".gz", "zstd": ".zst", None: ""}[compression]))
