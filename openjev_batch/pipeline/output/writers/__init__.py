"""Output formats, one writer per format (the readers' habit, pipeline/input/formats/): Parquet (parquet.py),
CSV and TSV (delimited.py), JSONL, JSONL.gz and JSON (json_text.py), registered by the name
options.output_format gives an output path (`WRITERS`, base.py). "Add an output format" is a `Writer` there,
its name in options.OUTPUT_FORMATS."""

from __future__ import annotations

from . import delimited, json_text, parquet  # noqa: F401 - each registers its writers
from .base import WRITERS, Writer

__all__ = ["WRITERS", "Writer"]
