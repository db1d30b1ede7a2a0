"""Hostile input values, checked wherever input arrives (input files, rows of either readout, questions,
options): a lone surrogate, an undecodable cell, nesting deeper than MAX_DEPTH, an integer beyond int64, byte
sizes past the limits, duplicate JSON keys. A problem is returned as text (the caller names the row and the
field), never raised past a row."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputFileError

# Hostile sizes are refused before any tokenization, so one row's memory stays bounded (a 50 MB state
# string peaked at 6.3 GB RSS in the tokenizer). 2 MiB of conversation is ~2× what the 262,144-token row
# limit admits of English text (readouts/label_logprobs/questions.py has the question text's limit).
MAX_STATE_BYTES = 2 * 2**20
# One input line (JSONL) or record (CSV) is refused unread past this (a 300 MB line peaked at 2.1 GB RSS
# read and decoded whole): 8× the state limit leaves room for JSON's escapes (\uXXXX: up to 6 bytes a
# character) and a row's questions and kept columns.
MAX_LINE_BYTES = 8 * MAX_STATE_BYTES


def kind_of(v: Any) -> str:
    """What a value is, in the words of the JSON or YAML a user wrote (`text`, `a number (5)`, `a list`), for
    "expected …, got …" messages: Python's type names (`got str`, `got NoneType`) are no user's words (issue
    42)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return f"a number ({v!r:.20})"
    if isinstance(v, str):
        return "text"
    if isinstance(v, bytes | bytearray | memoryview):
        return "bytes"
    if isinstance(v, list | tuple):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return f"a {type(v).__name__} value"


def no_symlink_loop(v: Path) -> Path:
    """`v`, unless it (or a folder on its way) is a symbolic link that leads back to itself: every later
    `resolve()` raised RuntimeError, a traceback (hostile trial, issue 34). Raises ValueError."""
    try:
        Path(v).resolve()
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError on a loop; 3.13 OSError (ELOOP)
        raise ValueError(f"{v}: a symbolic link loop (a link that leads back to itself)") from None
    return v


def refuse_old_mac_line_ends(first: bytes, what: str) -> None:
    """Raise InputFileError when a text file's first read line `first` (the byte-order mark dropped) holds a
    CR before its end and no LF: classic-Mac line ends, which readline sees as one line, so a CSV read as a
    header and "no rows" (issue 25's leftover) and a JSONL's rows after the first vanished inside line 1's
    error (the hostile trial). `what` begins the message (e.g. "t.csv: cannot read as CSV")."""
    if b"\n" not in first and b"\r" in first[:-1]:
        raise InputFileError(
            f"{what}: its lines end in CR alone (old Mac line ends); "
            "convert them to LF or CRLF first (e.g. `tr '\\r' '\\n'`)"
        )


def refuse_mixed_line_ends(lines: list[bytes], lineno: int, what: str) -> None:
    """Raise InputFileError when a record that could not be parsed (starting on line `lineno`, its raw
    `lines`) holds a CR before a line's end: mixed line ends, CR alone ending some lines and LF or CRLF
    others, so readline joined two rows and the second vanished inside the first's error (the hostile
    trial: refuse_old_mac_line_ends looks at the first line only). Only a record that failed is looked at:
    a CR inside a line that parses is JSON whitespace or a quoted CSV cell's text."""
    for i, line in enumerate(lines):
        if b"\r" in line.removesuffix(b"\n").removesuffix(b"\r"):
            raise InputFileError(
                f"{what}: line {lineno + i}: a CR alone ends a line inside it (mixed line ends); "
                "convert them to LF or CRLF first (e.g. `tr '\\r' '\\n'`)"
            )


MAX_DEPTH = 64  # nesting of any input value (JSON objects/lists); deeper is a row error, not a RecursionError
INT64 = (-(2**63), 2**63 - 1)
# A YAML document's nodes with its aliases expanded: a legitimate questions file (64 questions of 64
# options) has ~15,000; a "billion laughs" file of 9 nested aliases × 9 expands to 10^9 nodes, which every
# later walk of the parsed value paid for (validation took minutes before its error).
MAX_YAML_NODES = 200_000


@dataclass(frozen=True)
class InvalidText:
    """Stands in for an input cell that could not be decoded (invalid UTF-8 in a Parquet string column);
    `parse_row` turns it into a row error naming the field."""

    why: str


class StructValue(dict):
    """An Arrow struct cell (Parquet, a datasets folder, an Arrow table) as the dict it reads as. A struct type
    holds every field of every row, so a row that lacks a key holds null there: a `state` rendered as text
    leaves those out (`given_fields`), so the record that a JSONL row without the key gives reads the same
    (issue 42: Parquet added `key: null` lines)."""


def as_struct_values(value: Any) -> Any:
    """`value` (a struct column's cell, nested structs and lists of them too) with each dict a StructValue."""
    if isinstance(value, dict):
        return StructValue((k, as_struct_values(v)) for k, v in value.items())
    if isinstance(value, list):
        return [as_struct_values(v) for v in value]
    return value


def given_fields(value: Any) -> Any:
    """`value` with the null fields of its struct values left out (at any depth), as plain dicts and lists.
    Recursive: a struct's nesting is bounded by its Arrow type (and MAX_DEPTH is checked before)."""
    if isinstance(value, StructValue):
        return {k: given_fields(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and any(isinstance(v, StructValue | list) for v in value):
        return [given_fields(v) for v in value]
    return value


def value_problem(value: Any, ints: bool = False) -> str | None:
    """Why `value` cannot be carried as text/Arrow data, or None: a lone surrogate in a string (JSON `\\ud800`
    escapes; not encodable as UTF-8), an undecodable cell, nesting deeper than MAX_DEPTH, and with `ints` an
    integer outside int64 (Arrow's integer type). Iterative: a 100,000-deep value costs no recursion."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if not v.isascii():
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError as e:
                    return f"not valid Unicode text (lone surrogate {v[e.start]!r} at character {e.start})"
        elif isinstance(v, dict | list | tuple):
            if depth >= MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            items = v.items() if isinstance(v, dict) else v
            for x in items:
                stack.extend(
                    ((x[0], depth + 1), (x[1], depth + 1)) if isinstance(v, dict) else ((x, depth + 1),)
                )
        elif isinstance(v, InvalidText):
            return v.why
        elif ints and isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
            return f"integer {str(v)[:30]}{'…' if len(str(v)) > 30 else ''} is outside int64"
    return None


def option_text_problem(v: str) -> str | None:
    """`value_problem` of an option's text (a path, --system-prompt, --template): on the command line a byte
    that is not UTF-8 arrives as a surrogate escape (U+DC80–U+DCFF: Python decodes argv with
    surrogateescape), so it is named as the byte the user typed (a Latin-1 `Café`), not as a surrogate."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:
        c = ord(v[e.start])
        if 0xDC80 <= c <= 0xDCFF:
            return f"not valid UTF-8 (byte {c - 0xDC00:#04x} at character {e.start})"
        return value_problem(v)
    return None


def text_bytes(s: str) -> int:
    """UTF-8 size of `s` (4 × its length bounds it, so only strings near a limit are encoded)."""
    return len(s.encode("utf-8", "surrogatepass")) if not s.isascii() else len(s)


def kept_values(rec: dict[str, Any], keep: tuple[str, ...]) -> tuple[dict[str, Any], str | None]:
    """The `--keep` values of a record and the first problem among them (`<column>: why`), or None. A kept
    value that Arrow cannot hold (value_problem) is the row's error and is written as null."""
    kept = {k: rec.get(k) for k in keep}
    problems = {k: p for k, v in kept.items() if (p := value_problem(v, ints=True)) is not None}
    if not problems:
        return kept, None
    k, p = next(iter(problems.items()))
    return {k: (None if k in problems else v) for k, v in kept.items()}, f"{k}: {p}"


def text_field(rec: dict[str, Any], name: str) -> str:
    """The string field `name` of a record (not empty, encodable, at most MAX_STATE_BYTES as `state`);
    raises ValueError `name: why`, with the type named as the user wrote it (an undecodable cell says why,
    not which class stands in for it)."""
    v = rec.get(name)
    if v is None:
        raise ValueError(f"{name}: missing")
    if (problem := value_problem(v)) is not None:
        raise ValueError(f"{name}: {problem}")
    if not isinstance(v, str):
        raise ValueError(f"{name}: expected text, got {kind_of(v)}")
    if (n := text_bytes(v)) > MAX_STATE_BYTES:  # refused before the tokenizer: 3 MB took 1.2 GB there
        raise ValueError(f"{name}: {n:,} bytes of text, limit {MAX_STATE_BYTES:,}")
    if not v.strip():
        raise ValueError(f"{name}: empty")
    return v


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json object hook: plain json.loads keeps the last of two equal keys silently (two options with
    one name would merge); raise instead, naming the key."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:  # the first key seen twice
            if k in seen:
                raise ValueError(f"duplicate key {k!r} in a JSON object")
            seen.add(k)
    return d


_PIPES_READ: dict[str, bytes] = {}  # a named pipe's content, by its real path: a pipe can be read only once


class NoWriter(OSError):
    """A named pipe that nothing writes to (any more): reading it would wait for ever."""


def read_at_most(path: str | Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of `path`: more than `limit` means the file is over it, which the caller
    reports in its own terms. Every small file is read this way: `-q /dev/zero` was read to its end before
    any size check (issue 25).

    A named pipe (`-q <(…)`, a FIFO) is opened without waiting for a writer and read once: its content is
    kept for the rest of the command, which reads an option's file more than once (`-q`, `--config` and
    `--system-prompt @…` on a FIFO hung in the second open, waiting for a writer that had gone: issue 42).
    One with no writer raises NoWriter at once. Raises OSError."""
    key = os.path.realpath(path)
    if key in _PIPES_READ:
        return _PIPES_READ[key][: limit + 1]
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    with os.fdopen(fd, "rb") as f:
        if stat.S_ISREG(mode):
            return f.read(limit + 1)
        # a pipe or device: reads wait for data from here on (a writer still writing is waited for; a pipe with
        # no writer reads as its end at once)
        os.set_blocking(fd, True)
        data = f.read(limit + 1)
    if stat.S_ISFIFO(mode):
        if not data:
            raise NoWriter(errno.EPIPE, "a named pipe with nothing written to it; give a file or write to the pipe")
        _PIPES_READ[key] = data
    return data


def special_file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file read whole or more than once (a benchmark, a run output): it names
    a pipe, device or socket (found by stat, which never waits: a FIFO there hung waiting for its writer,
    issue 42; `/dev/zero` never ends). None for a file, a folder or a missing path (the reader names it)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    device = stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
    kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device" if device else "a socket"
    return f"{path}: {kind}, not a regular file; write it to a file first"


def yaml_alias_problem(node: Any) -> str | None:
    """Why a composed YAML document (a PyYAML node graph, aliases still shared) may not be constructed: its
    aliases expand it past MAX_YAML_NODES, or one refers to the node that holds it. Counted once per
    distinct node, so the check itself is linear in the file."""
    sizes: dict[int, int | None] = {}  # None: being counted (an alias back to it is a cycle)

    def size(n: Any) -> int:
        if id(n) in sizes:
            if (known := sizes[id(n)]) is None:
                raise ValueError("an alias refers to the node that contains it")
            return known
        sizes[id(n)] = None
        children = n.value if isinstance(n.value, list) else []
        total = 1 + sum(size(c) for item in children for c in (item if isinstance(item, tuple) else (item,)))
        sizes[id(n)] = capped = min(total, MAX_YAML_NODES + 1)  # capped: the sum stays a small integer
        return capped

    try:
        if size(node) > MAX_YAML_NODES:
            return f"its aliases expand it past {MAX_YAML_NODES:,} nodes (a questions file needs far fewer)"
    except ValueError as e:
        return str(e)
    return None


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in 16 MiB pieces (a model's weights, an output, a benchmark)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(1 << 24):
            h.update(piece)
    return h.hexdigest()
