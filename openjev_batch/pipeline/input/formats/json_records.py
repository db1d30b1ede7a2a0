"""JSONL and JSON input as chunks of (position, record or the error text of an unreadable line).

JSONL (one object per line, also .gz/.zst): each line is read with a bounded readline, so a line over
MAX_LINE_BYTES is that row's error, skipped unread in pieces (a 300 MB line in a small .gz peaked at 2.1 GB
RSS, read and decoded whole); a line that is not UTF-8, not JSON or not an object is its row's error. JSON:
one array of row objects, read whole (JSON has no record boundaries). Duplicate keys are refused
(values.no_duplicate_keys). `hasher` is fed the raw (decompressed) bytes as they are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ....errors import InputFileError
from ....values import (
    MAX_LINE_BYTES,
    kind_of,
    no_duplicate_keys,
    refuse_mixed_line_ends,
    refuse_old_mac_line_ends,
)

Chunk = list[tuple[int, Any]]  # (position, record dict or the error text of an unreadable line)


def _skip_long_line(f, hasher) -> None:
    """Read past the rest of a line over MAX_LINE_BYTES, in bounded pieces."""
    while piece := f.readline(1 << 20):
        if hasher is not None:
            hasher.update(piece)
        if piece.endswith(b"\n"):
            break


def _parse_line(raw: bytes, lineno: int) -> dict[str, Any] | str:
    """One JSONL line → its record, or the row's error text naming the line."""
    if b"\x00" in raw:  # UTF-16 (a Windows "Unicode" save): every line said "malformed JSON (Expecting value…)"
        return f"line {lineno}: NUL bytes, so not UTF-8 text (UTF-16? save the file as UTF-8)"
    try:
        rec = json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicate_keys)
        if not isinstance(rec, dict):
            raise ValueError(f"expected a JSON object, got {kind_of(rec)}")
        return rec
    except UnicodeDecodeError as e:
        return f"line {lineno}: not valid UTF-8 (byte {e.start})"
    except json.JSONDecodeError as e:
        return f"line {lineno}: malformed JSON ({e})"
    except RecursionError:  # json's C decoder recurses once per level
        return f"line {lineno}: JSON nested too deeply"
    except ValueError as e:
        return f"line {lineno}: {e}"


def jsonl_records(f, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
    """Chunks of a binary JSONL stream `f` (closed at the end); blank lines are no rows."""
    chunk: Chunk = []
    pos = lineno = 0
    with f:
        while raw := f.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if hasher is not None:
                hasher.update(raw)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _skip_long_line(f, hasher)
                rec: dict[str, Any] | str = (
                    f"line {lineno}: over {MAX_LINE_BYTES:,} bytes in one row (the limit), not read"
                )
            else:
                if lineno == 1:
                    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark (Windows editors)
                    refuse_old_mac_line_ends(raw, "cannot read as JSONL")
                if not raw.strip():
                    continue
                rec = _parse_line(raw, lineno)
                if isinstance(rec, str):
                    refuse_mixed_line_ends([raw], lineno, "cannot read as JSONL")
            chunk.append((pos, rec))
            pos += 1
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def count_lines(f) -> int:
    """Non-blank lines, read in bounded pieces (a line is never held whole)."""
    n, blank = 0, True
    with f:
        while piece := f.readline(1 << 20):
            blank = blank and not piece.strip()
            if piece.endswith(b"\n"):
                n, blank = n + (not blank), True
    return n + (not blank)


def json_records(f, name: str, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
    """Chunks of a binary stream `f` holding one JSON array of row objects (`name`: the file, for errors).
    Raises InputFileError for a file that is not such an array."""
    with f:
        raw = f.read()
    if hasher is not None:
        hasher.update(raw)
    try:
        data = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=no_duplicate_keys)
    except RecursionError:
        raise InputFileError(f"{name}: cannot read as JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InputFileError(
            f"{name}: cannot read as JSON: {e} (one object per line? name it .jsonl)"
        ) from None
    if not isinstance(data, list):
        raise InputFileError(
            f"{name}: expected a JSON array of row objects, got {kind_of(data)} "
            "(one object per line? name it .jsonl)"
        )
    for start in range(0, len(data), chunk_rows):
        yield [
            (
                pos,
                rec
                if isinstance(rec, dict)
                else f"item {pos}: expected a JSON object, got {kind_of(rec)}",
            )
            for pos, rec in enumerate(data[start : start + chunk_rows], start)
        ]
