"""CSV input as a stream of records, each named by the line it starts on.

Why not pyarrow's CSV reader (used before, issue 25): an unclosed quote silently swallowed every later row
(rc 0, "0 errors"), a cell over its ~2–3 MB block made the whole file unreadable and a 50 MB one aborted the
process, and none of its errors names a line. Here a quote-aware scan of bounded reads finds each record's
lines (a record over MAX_LINE_BYTES is skipped unread: that row's error), then the stdlib csv module, whose
rules the scan follows (RFC 4180 quoting, `""` an escaped quote, a quote inside an unquoted cell literal),
parses it. Every cell is text (a CSV has no types: an id `007` stays `007`), an empty cell null.
"""

from __future__ import annotations

import csv
import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ....errors import InputFileError, InputWarning
from ....values import MAX_LINE_BYTES, InvalidText, refuse_mixed_line_ends, refuse_old_mac_line_ends

_PIECE = 1 << 20  # bytes per read: a longer line arrives in pieces, so no read is unbounded
_BOM = b"\xef\xbb\xbf"
_QUOTE, _CR, _LF = 0x22, 0x0D, 0x0A
# scan states: at a field's start, in an unquoted field, in quotes, just after a quote in quotes at a
# read's end (an escaped `""` or the close: the next byte decides), just after a closing quote
_START, _PLAIN, _QUOTED, _QUOTE_END, _CLOSED = range(5)
_QUOTED_TEXT = re.compile(rb'[^"]*(?:""[^"]*)*')  # up to the first quote that is not an escaped `""`
_ESCAPED = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8
_MAX_WARNINGS = 5

# csv refuses a field over 131,072 characters by default; a record is bounded by MAX_LINE_BYTES instead
csv.field_size_limit(max(csv.field_size_limit(), MAX_LINE_BYTES + 1))


@dataclass
class Record:
    line: int  # the physical line it starts on (1-based)
    end: int  # the line it ends on
    lines: list[bytes] | None  # None: over MAX_LINE_BYTES, not kept
    suspect: str | None = None  # why it may hold rows a quote left open swallowed
    delim: str = ","  # "\t" for TSV


class _Scan:
    """Where the quote state stands across reads: only quotes and delimiters matter, found by C code
    (bytes.find, a regex), not byte by byte. `commas` counts the delimiters inside quotes on a line that began
    in quotes; `suspect` says why a record may hold rows an open quote swallowed."""

    def __init__(self, delim: str):
        self.comma, self.comma_b = ord(delim), delim.encode()
        self.st, self.quote_line = _START, 0  # the line the current quoted field opened on
        self.line_quoted, self.commas = False, 0
        self.suspect: str | None = None

    def new_line(self) -> None:
        self.line_quoted, self.commas = self.st == _QUOTED, 0

    def end_record(self) -> None:
        self.st, self.suspect = _START, None

    def feed(self, buf: bytes, lineno: int) -> None:
        st, i, n = self.st, 0, len(buf)
        if st != _QUOTED and buf[-1] == _LF and b'"' not in buf:
            return  # a whole line without a quote changes nothing
        while i < n:
            if st == _QUOTED:
                j = _QUOTED_TEXT.match(buf, i).end()  # type: ignore[union-attr]
                if self.line_quoted:
                    self.commas += buf.count(self.comma_b, i, j)
                if j >= n - 1:  # still in quotes, or a quote that the next read's byte decides
                    st = _QUOTED if j == n else _QUOTE_END
                    break
                i, st = j + 1, _CLOSED  # a lone quote: the close
            elif st == _QUOTE_END:
                if buf[i] == _QUOTE:
                    i, st = i + 1, _QUOTED
                    continue
                st = _CLOSED
            elif st == _CLOSED:
                c = buf[i]
                if c == self.comma:
                    i, st = i + 1, _START
                    continue
                if c not in (_CR, _LF) and self.quote_line < lineno and self.suspect is None:
                    self.suspect = f"the closing quote on line {lineno} is followed by text, not a comma"
                st = _PLAIN
            elif st == _START:
                if buf[i] == _QUOTE:
                    i, st, self.quote_line = i + 1, _QUOTED, lineno
                    continue
                st = _PLAIN
            else:  # _PLAIN: a quote here is literal; the field ends at the next delimiter
                j = buf.find(self.comma_b, i)
                if j < 0:
                    break
                i, st = j + 1, _START
        self.st = st


class Records:
    """Iterate a binary CSV stream's records. Raises InputFileError when the file ends inside quotes,
    naming the line the quote opened on. `row_delims` (the header's commas, set once it is read) lets a
    quoted field that spans lines and holds a whole line of as many commas be reported as suspect."""

    def __init__(self, f, name: str, hasher=None, delim: str = ","):
        self.f, self.name, self.hasher, self.delim = f, name, hasher, delim
        self.row_delims: int | None = None

    def _reads(self) -> Iterator[bytes]:
        """Bounded reads of the stream (a line, or a piece of a longer one), the byte-order mark dropped."""
        first = True
        while buf := self.f.readline(_PIECE):
            if self.hasher is not None:
                self.hasher.update(buf)
            if first:
                buf, first = buf.removeprefix(_BOM), False
                if not buf:  # a read of the byte-order mark alone
                    first = True
                    continue
                refuse_old_mac_line_ends(buf, f"{self.name}: cannot read as CSV")
            yield buf

    def __iter__(self) -> Iterator[Record]:
        scan = _Scan(self.delim)
        lineno = start = 1
        lines: list[bytes] | None = []  # None: the record is over MAX_LINE_BYTES, not kept
        pieces: list[bytes] = []
        size, line_start = 0, True
        for buf in self._reads():
            if line_start:
                scan.new_line()
                line_start = False
            size += len(buf)
            if lines is not None:
                if size > MAX_LINE_BYTES:
                    lines, pieces = None, []
                else:
                    pieces.append(buf)
            scan.feed(buf, lineno)
            if buf[-1] != _LF:
                continue  # a piece of a longer line
            # a line wholly inside quotes (it began in them and the field goes on past it) with a row's
            # commas: a row swallowed? The field's last line may hold commas in a valid file (issue 48.8)
            if (
                scan.line_quoted
                and scan.st == _QUOTED
                and scan.suspect is None
                and self.row_delims
                and scan.commas >= self.row_delims
            ):
                what = "tabs" if self.delim == "\t" else "commas"
                scan.suspect = f"line {lineno} inside it has as many {what} as a row"
            if lines is not None:
                lines.append(b"".join(pieces))
            pieces, line_start = [], True
            if scan.st != _QUOTED:  # a line end outside quotes ends the record
                yield Record(start, lineno, lines, scan.suspect, self.delim)
                scan.end_record()
                start, lines, size = lineno + 1, [], 0
            lineno += 1
        # end of file
        if scan.st == _QUOTED:
            raise InputFileError(
                f"{self.name}: cannot read as CSV: line {scan.quote_line}: a quoted field opens here "
                "and is never closed (the file ends inside it)"
            )
        if size:  # a last line without a line end
            if lines is not None:
                lines.append(b"".join(pieces))
            yield Record(start, lineno, lines, scan.suspect, self.delim)


def _blank(rec: Record) -> bool:
    return rec.lines is not None and len(rec.lines) == 1 and not rec.lines[0].strip()


def _fields(rec: Record) -> list[str]:
    """The record's cells (surrogate-escaped where a byte is not UTF-8). Raises csv.Error."""
    texts = [b.decode("utf-8", "surrogateescape") for b in rec.lines or ()]
    reader = csv.reader(texts, strict=False, delimiter=rec.delim)
    fields = next(reader, [])
    if any(rest for rest in reader):  # the scan and csv disagree on where the record ends: not guessed
        raise csv.Error("more than one record")
    return fields


def _where(rec: Record) -> str:
    return f"line {rec.line}" if rec.end == rec.line else f"lines {rec.line}–{rec.end}"


def _cell(s: str) -> Any:
    if not s:
        return None
    if s.isascii() or not _ESCAPED.search(s):
        return s
    raw = s.encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return InvalidText(f"not valid UTF-8 (byte {raw[e.start]:#04x} at {e.start})")
    return s


def header(records: Iterator[Record], name: str) -> list[str] | None:
    """The column names of the first non-blank record, or None for a file with none. Raises
    InputFileError for a header that cannot be read or names a column twice."""
    for rec in records:
        if _blank(rec):
            continue
        if rec.lines is None:
            raise InputFileError(f"{name}: cannot read as CSV: the header is over {MAX_LINE_BYTES:,} bytes")
        try:
            names = _fields(rec)
        except csv.Error as e:
            raise InputFileError(f"{name}: cannot read as CSV: {_where(rec)}: {e}") from None
        if any(isinstance(_cell(n), InvalidText) for n in names):
            raise InputFileError(f"{name}: cannot read as CSV: the header is not valid UTF-8")
        # JSONL refuses a duplicate key per row; a CSV header naming a column twice would silently answer
        # from the last one (hostile trial), so the file is refused. Counted once: `names.count(n)` per name
        # was quadratic (issue 34.18: a 100,000-column header took 10.5 min to validate)
        if dup := sorted(n for n, k in Counter(names).items() if k > 1):
            raise InputFileError(f"{name}: the CSV header names column(s) {', '.join(map(repr, dup))} twice")
        return names
    return None


def record_chunks(f, name: str, chunk_rows: int, hasher=None, delim: str = ","):
    """Chunks of (position, row dict or the error text of an unreadable record), as formats.record_chunks.
    A suspect record (a quote left open?) is read as written and warned about (InputWarning), naming it."""
    records = Records(f, name, hasher, delim)
    with f:
        it = iter(records)
        names = header(it, name)
        if names is None:
            return
        records.row_delims = len(names) - 1
        chunk: list[tuple[int, Any]] = []
        pos = warned = 0
        for rec in it:
            if _blank(rec):
                continue
            row = _row(rec, names)
            if isinstance(row, str) and rec.lines is not None:
                refuse_mixed_line_ends(rec.lines, rec.line, f"{name}: cannot read as CSV")
            chunk.append((pos, row))
            pos += 1
            if rec.suspect and warned <= _MAX_WARNINGS:  # a few, then one line saying there are more
                warned += 1
                warnings.warn(
                    f"{name}: {_where(rec)}: a quoted field spans lines and {rec.suspect} (a quote left "
                    "open swallows the rows after it into one cell)"
                    if warned <= _MAX_WARNINGS
                    else f"{name}: more quoted fields like these; not all are listed",
                    InputWarning,
                    stacklevel=2,
                )
            if len(chunk) >= chunk_rows:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def _row(rec: Record, names: list[str]) -> dict[str, Any] | str:
    if rec.lines is None:
        return f"{_where(rec)}: over {MAX_LINE_BYTES:,} bytes in one row (the limit), not read"
    try:
        fields = _fields(rec)
    except csv.Error as e:
        return f"{_where(rec)}: malformed CSV ({e})"
    if len(fields) != len(names):
        got = f"{len(fields)} field{'' if len(fields) == 1 else 's'}"
        return f"{_where(rec)}: {got}, the header has {len(names)} (a comma in an unquoted cell?)"
    return {k: _cell(v) for k, v in zip(names, fields, strict=True)}


def count(f, name: str, delim: str = ",") -> int:
    """The data rows of a CSV stream, without parsing them (InputFileError for a quote never closed)."""
    with f:
        n = sum(not _blank(rec) for rec in Records(f, name, delim=delim))
    return max(n - 1, 0)


def columns(f, name: str, delim: str = ",") -> list[str]:
    with f:
        return header(iter(Records(f, name, delim=delim)), name) or []
