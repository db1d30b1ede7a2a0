"""The input ledger, `<out>.partial/chunks.jsonl`: per input chunk, its rows, the output records it must
give and the sha256 of the input read up to its end.

Resume identifies the input by content: the digest is computed while reading (`read.read_rows(hasher=…)`),
and a resumed run refuses as soon as the input it reads differs from what an earlier run of this job read.
Size and mtime are not used (a touched identical copy resumes; a same-size, same-mtime edit is refused).
Entries are appended as chunks are read, never rewritten; a line torn by a kill is skipped (its chunk reruns).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...core import split_input_key
from ...errors import ConfigError

LEDGER = "chunks.jsonl"


def changed(then: str | None, now: str | None, since: str, chunk: int | None = None) -> str:
    """What differs between two resume keys (core.input_key), in words: the input's content, or the content
    of the image files its rows name (the input itself unchanged). `since`: what was written then."""
    (sha_then, img_then), (sha_now, img_now) = split_input_key(then), split_input_key(now)
    what, then, now = "the input", sha_then, sha_now
    if sha_then == sha_now:
        what, then, now = "an image file the rows name", img_then, img_now
    at = f"its content differs at input chunk {chunk} or before: " if chunk is not None else ""
    return f"{what} changed since {since} was written ({at}sha256 {str(then)[:12]}… then, {str(now)[:12]}… now)"


class Ledger:
    """The ledger of one job's partial output folder (`partial`); `entries` by chunk index."""

    def __init__(self, partial: Path, entries: dict[int, dict] | None = None):
        self.partial = partial
        self.entries: dict[int, dict] = entries or {}
        self.seen = 0  # chunks this run has read

    @classmethod
    def read(cls, partial: Path) -> Ledger:
        """The ledger an earlier run of this job left (empty when there is none)."""
        out: dict[int, dict] = {}
        p = partial / LEDGER
        if p.exists():
            for line in p.read_text().splitlines():
                try:
                    e = json.loads(line)
                    out[int(e["chunk"])] = e
                except (ValueError, KeyError, TypeError):  # a line torn by a kill: that chunk reruns
                    continue
        return cls(partial, out)

    def begin(self, chunk: int, rows: int, records: int, input_sha256: str) -> None:
        """Record (or, resuming, check) input chunk `chunk`. Raises ConfigError when an earlier run of this
        job read different input there (the partial cannot be resumed with this input)."""
        entry = {"chunk": chunk, "rows": rows, "records": records, "input_sha256": input_sha256}
        self.seen = max(self.seen, chunk + 1)
        old = self.entries.get(chunk)
        if old == entry:
            return
        if old is not None:
            raise ConfigError(
                f"--resume: {changed(old['input_sha256'], input_sha256, str(self.partial), chunk)}; delete it or "
                "rerun without --resume"
            )
        self.entries[chunk] = entry
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC  # never through a link
        with os.fdopen(os.open(self.partial / LEDGER, flags, 0o644), "a") as f:
            f.write(json.dumps(entry) + "\n")

    def __contains__(self, chunk: int) -> bool:
        return chunk in self.entries

    def records(self, chunk: int) -> int:
        return self.entries[chunk]["records"]

    def check_not_shrunk(self) -> None:
        """Raise ConfigError when an earlier run read more input chunks than this one (the input shrank)."""
        if extra := sorted(c for c in self.entries if c >= self.seen):
            raise ConfigError(
                f"--resume: the input changed since {self.partial} was written (it ends before input chunk "
                f"{extra[0]}, which an earlier run read); delete it or rerun without --resume"
            )

    def totals(self) -> tuple[int, int]:
        """(input rows, output records) of the chunks this run read."""
        rows = sum(self.entries[i]["rows"] for i in range(self.seen))
        return rows, sum(self.records(i) for i in range(self.seen))

    def input_sha256(self) -> str | None:
        """The resume key of the whole input this run read (its last chunk's: core.input_key), None before
        any chunk."""
        return self.entries[self.seen - 1]["input_sha256"] if self.seen else None
