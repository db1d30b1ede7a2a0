"""Where a job's rows come from (pipeline/loop.py reads every job through one of these): an input file
(`FileSource`: formats/' readers, with the content digest `--resume` keys on) or in-memory data
(`FrameSource`: frames.py's DataFrames, Arrow tables, iterables of dicts). Both yield chunks of the readout's
rows, duplicate ids made row errors (read.parse_records); `Source` is what the loop asks of them."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ...core import input_key
from ...readouts import readout_class
from ...readouts.base import Readout
from .formats import count_rows, kept_types
from .frames import records_of
from .read import check_has_column, check_input, job_rows, parse_records

if TYPE_CHECKING:
    from ...config import RunConfig


class Source(Protocol):
    """What the loop asks of a source: whole-input checks before any model loads (`check`), the rows up
    front for a progress total (`count_rows`, None when not known), the kept columns' types where the input
    has a schema (`kept_types`, else None), and the rows: (chunk of the readout's rows, the input's sha256 up
    to the chunk's end or None) per chunk, in input order (`chunks`)."""

    def check(self) -> None: ...

    def count_rows(self) -> int | None: ...

    def kept_types(self) -> dict[str, pa.DataType] | None: ...

    def chunks(self, readout: Readout) -> Iterator[tuple[list, str | None]]: ...


class FileSource:
    """A job's input file (`cfg.input`, read by `cfg.chunk_rows`, the first `cfg.limit` rows)."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def check(self) -> None:
        """Whole-file checks, before any model loads. Raises InputFileError."""
        check_input(self.cfg.input, self.cfg.keep)
        for column, hint in readout_class(self.cfg.readout).needed_columns(self.cfg.readout_options):
            check_has_column(self.cfg.input, column, hint)

    def count_rows(self) -> int | None:
        return count_rows(self.cfg.input, self.cfg.limit)

    def kept_types(self):
        """The kept columns' types where the input has a schema (formats.kept_types), else None."""
        return kept_types(self.cfg.input, self.cfg.keep)

    def chunks(self, readout: Readout) -> Iterator[tuple[list, str | None]]:
        """(rows, the resume key up to the chunk's end) per input chunk, in input order: the input's sha256,
        and once a row names an image file, the sha256 over the contents of the image files named so far
        (core.input_key): an image changed between a crash and `--resume` is another input."""
        rows, digest = job_rows(self.cfg, readout)
        images = hashlib.sha256()
        named = False
        for chunk in rows:
            for row in chunk:
                for sha in _file_images(row):
                    images.update(sha.encode())
                    named = True
            # read here, before the reader moves to the next chunk
            yield chunk, input_key(digest.hexdigest(), images.hexdigest() if named else None)


def _file_images(row: Any) -> Iterator[str]:
    """The content sha256 of each image file a row names (its image column, then its messages' image parts);
    inline images are bytes of the input, which its own digest covers."""
    for im in getattr(row, "images", ()):
        if getattr(im, "path", None) is not None:
            yield im.sha256
    for m in getattr(row, "messages", ()):
        for p in getattr(m, "parts", ()):
            if getattr(p, "path", None) is not None:
                yield p.sha256


class FrameSource:
    """The Python API's data (frames.py: `kind` as `frames.kind_of` names it)."""

    def __init__(self, data: Any, kind: str, chunk_rows: int, limit: int | None = None):
        self.data, self.kind, self.chunk_rows, self.limit = data, kind, chunk_rows, limit
        self._positions: list[list[int]] = []  # per chunk read: each output record's input row position

    def check(self) -> None:
        pass  # frames.py's checks ran when the data was taken (api.Classifier.run)

    def count_rows(self) -> int | None:
        if self.kind == "records":  # an iterable may be a generator: it is read once
            return None
        n = len(self.data)
        return min(n, self.limit or n)

    def kept_types(self):
        return None

    def chunks(self, readout: Readout) -> Iterator[tuple[list, str | None]]:
        data = self.data
        if self.limit is not None and self.kind in ("pandas", "polars", "arrow"):
            # only the rows asked for are converted: `limit=10` on a 10M-row frame converted all of it first
            # (18.8 s, +1.4 GB; issue 34.18)
            data = data.iloc[: self.limit] if self.kind == "pandas" else data.slice(0, self.limit)
        recs = records_of(data, self.kind, self.chunk_rows)
        self._positions = []
        for chunk in parse_records(recs, limit=self.limit, readout=readout):
            self._positions.append([r.pos for r in chunk for _ in range(readout.n_records(r))])
            yield chunk, None  # no resume: nothing to key on

    def positions(self) -> list[int]:
        """Each output record's input row position (0-based, in the data given), in output order (the
        sink's chunk order is the read order): what a pandas output's index is taken from. Ids cannot
        say it: a null id reads as its row's position (which may be another row's id), a repeated id
        names two rows (the hostile trial's wrong joins)."""
        return [p for chunk in self._positions for p in chunk]
