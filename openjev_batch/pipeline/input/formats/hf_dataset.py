"""The datasets-folder reader: a folder written by `datasets`' `save_to_disk` (its `state.json` and Arrow
files, arrow_records.py); a DatasetDict folder is refused naming its splits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ....errors import InputFileError
from .arrow_records import (
    arrow_batches,
    arrow_may_have_images,
    arrow_schema,
    hf_dataset_files,
    hf_kept_types,
    json_file,
    rechunk,
)
from .base import Chunk, Reader, register


@register("hf-dataset")
class HFDatasetReader(Reader):
    title = "a datasets folder"
    failures = Exception

    def claims_folder(self, path: Path) -> bool:
        """True for a folder datasets' save_to_disk wrote; InputFileError for a DatasetDict folder (naming
        its splits). False for any other folder."""
        if (path / "state.json").is_file():
            return True
        if not (path / "dataset_dict.json").is_file():
            return False
        splits = json_file(path / "dataset_dict.json")
        splits = splits.get("splits") if isinstance(splits, dict) else None
        if isinstance(splits, list) and splits and all(isinstance(s, str) for s in splits):
            raise InputFileError(
                f"{path}: a datasets DatasetDict folder; pass one split's folder, e.g. "
                + ", ".join(str(path / s) for s in splits[:3])
            )
        raise InputFileError(
            f"{path}: a datasets DatasetDict folder, but its dataset_dict.json lists no splits; pass "
            "one split's folder (the one with a state.json)"
        )

    def chunks(self, path: Path, compression: str | None, chunk_rows: int, hasher=None) -> Iterator[Chunk]:
        return rechunk(arrow_batches(hf_dataset_files(path)), chunk_rows, hasher)

    def columns(self, path: Path, compression: str | None) -> set[str] | None:
        files = hf_dataset_files(path)
        return set(arrow_schema(files[0]).names) if files else set()

    def schemas(self, path: Path) -> list[tuple[Path, list[str]]]:
        return [(f, arrow_schema(f).names) for f in hf_dataset_files(path)]

    def may_have_images(self, path: Path, compression: str | None) -> bool:
        files = hf_dataset_files(path)
        return bool(files) and arrow_may_have_images(arrow_schema(files[0]), arrow_batches(files))

    def count(self, path: Path, compression: str | None) -> int:
        return sum(b.num_rows for b in arrow_batches(hf_dataset_files(path)))

    def kept_types(self, path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType] | None:
        return hf_kept_types(path, keep)
