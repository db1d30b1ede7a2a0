"""Arrow-typed input, Parquet files and `datasets` folders (`save_to_disk`), as chunks of (position,
record), and what their schemas answer before a job (column names, the `--keep` columns' types).

A datasets folder is read with pyarrow, so `datasets` need not be installed; the Arrow files its state.json
lists must lie inside the folder (the folder may come from anyone). Arrow does not validate UTF-8 on read: a
cell that does not decode becomes an `InvalidText`, which the readout reports as that row's error naming the
column. `hasher` is fed the Arrow schema and record batches in Arrow IPC form as they are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ....errors import InputFileError
from ....values import InvalidText, as_struct_values, no_duplicate_keys, read_at_most
from .base import IMAGE_KEY_PATTERN, IMAGE_KEYS

META_BYTES = 1 << 20  # a datasets folder's state.json / dataset_dict.json (a few hundred bytes as written)
DATASETS = "a datasets folder"  # the format's name in messages


def json_file(path: Path) -> Any:
    """A datasets folder's metadata file as JSON. Raises InputFileError naming it."""
    raw = read_at_most(path, META_BYTES)
    if len(raw) > META_BYTES:
        raise InputFileError(f"{path}: over {META_BYTES:,} bytes; not a datasets metadata file")
    try:
        return json.loads(raw.decode("utf-8-sig"), object_pairs_hook=no_duplicate_keys)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputFileError(f"{path}: not valid JSON ({e})") from None


def hf_dataset_files(path: Path) -> list[Path]:
    """The Arrow files a `datasets` folder's state.json lists. Each must be a file name inside the folder:
    `../other/data.arrow` or an absolute path was read as named."""
    state = json_file(path / "state.json")
    entries = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("filename"), str) for e in entries
    ):
        raise InputFileError(f'{path}/state.json: expected `_data_files`, a list of {{"filename": ...}}')
    root = path.resolve()
    files = []
    for e in entries:
        name = e["filename"]
        p = path / name
        if Path(name).is_absolute() or ".." in Path(name).parts or not p.resolve().is_relative_to(root):
            raise InputFileError(f"{path}/state.json: data file {name!r} is outside the folder")
        files.append(p)
    return files


def arrow_schema(p: Path) -> pa.Schema:
    with pa.memory_map(str(p)) as src:
        try:
            return pa.ipc.open_stream(src).schema
        except pa.ArrowInvalid:
            return pa.ipc.open_file(src).schema


def arrow_batches(files: list[Path]) -> Iterator[pa.RecordBatch]:
    """Record batches of a `datasets` folder's Arrow files (the IPC stream format `save_to_disk` writes;
    the file format is accepted too)."""
    for p in files:
        with pa.memory_map(str(p)) as src:
            try:
                reader = pa.ipc.open_stream(src)
            except pa.ArrowInvalid:
                reader = pa.ipc.open_file(src)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
                continue
            yield from reader


def rechunk(
    batches: Iterable[pa.RecordBatch], chunk_rows: int, hasher=None
) -> Iterator[list[tuple[int, dict[str, Any] | str]]]:
    """Record batches → chunks of `chunk_rows` (position, record)."""
    pos, buf = 0, []
    schema = None
    for b in batches:
        if hasher is not None:
            if b.schema != schema:
                schema = b.schema
                hasher.update(schema.serialize())
            hasher.update(b.serialize())
        buf.extend(batch_records(b))
        while len(buf) >= chunk_rows:
            yield list(enumerate(buf[:chunk_rows], pos))
            pos += chunk_rows
            buf = buf[chunk_rows:]
    if buf:
        yield list(enumerate(buf, pos))


def batch_records(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """A record batch (Parquet, CSV, datasets, a DataFrame) as row dicts; an undecodable cell becomes an
    `InvalidText` (see the module doc); a struct cell's dicts are StructValues (values.py: a state rendered as
    text leaves out the fields the row does not have)."""
    structs = [n for n, t in zip(batch.schema.names, batch.schema.types, strict=True) if _has_struct(t)]
    for name in structs:  # pyarrow's own words were "Converting to Python dictionary is not supported …"
        if twice := _twice(batch.schema.field(name).type):
            raise ValueError(f"column {name!r}: a struct with two fields named {twice!r} (a row is read as a "
                             "mapping, whose names are unique); rename one")  # fmt: skip
    try:
        recs = batch.to_pylist()
    except UnicodeDecodeError:
        recs = _records_cell_by_cell(batch)
    for rec in recs if structs else ():
        for name in structs:
            if isinstance(rec.get(name), dict | list):
                rec[name] = as_struct_values(rec[name])
    return recs


def _twice(t: pa.DataType) -> str | None:
    """A field name that a struct in `t` (nested in structs and lists too) gives twice (issue 48.8)."""
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        if dup := next((n for n in names if names.count(n) > 1), None):
            return dup
        return next((d for i in range(t.num_fields) if (d := _twice(t.field(i).type))), None)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _twice(t.value_type)
    return None


def _has_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_struct(t.value_type)
    return False


def _records_cell_by_cell(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    cols: dict[str, list[Any]] = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        try:
            cols[name] = col.to_pylist()
        except UnicodeDecodeError:
            vals: list[Any] = []
            for i in range(len(col)):
                try:
                    vals.append(col[i].as_py())
                except UnicodeDecodeError as e:
                    vals.append(InvalidText(f"not valid UTF-8 (byte {e.object[e.start]:#04x} at {e.start})"))
            cols[name] = vals
    return [dict(zip(cols, vs, strict=True)) for vs in zip(*cols.values(), strict=True)]


def hf_kept_types(path: Path, keep: tuple[str, ...]) -> dict[str, pa.DataType]:
    """The `--keep` columns' types over every Arrow file of a datasets folder: one file's column may be
    null-typed (all its values null) or int where another's is float, so the types are unified (the write
    failed with ArrowInvalid on a later file's values); types that do not unify are a job error."""
    try:
        schemas = [arrow_schema(p) for p in hf_dataset_files(path)]
    except InputFileError:
        raise
    except Exception as e:
        raise InputFileError(f"{path}: cannot read as {DATASETS}: {e}") from e
    types: dict[str, pa.DataType] = {}
    for k in keep:
        fields = [s.field(k) for s in schemas if k in s.names]
        if not fields:
            types[k] = pa.null()
            continue
        try:
            unified = pa.unify_schemas([pa.schema([f]) for f in fields], promote_options="permissive")
            types[k] = unified.field(k).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            kinds = ", ".join(sorted({str(f.type) for f in fields}))
            raise InputFileError(
                f"{path}: --keep column {k!r} has different types in the folder's Arrow files ({kinds})"
            ) from None
    return types


def _field_names(t: pa.DataType) -> Iterator[str]:
    """The names of the fields nested in an Arrow type (structs, lists, maps), at any depth."""
    if pa.types.is_struct(t):
        for f in t:
            yield f.name
            yield from _field_names(f.type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _field_names(t.value_type)
    elif pa.types.is_map(t):
        yield from _field_names(t.key_type)
        yield from _field_names(t.item_type)


def arrow_may_have_images(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> bool:
    """Whether an Arrow input's rows may carry an image: a column or a nested field named `image`, `images` or
    `image_url` (messages as structs), or a text column holding such a JSON key (messages as JSON text),
    scanned batch by batch."""
    if any(f.name in IMAGE_KEYS or IMAGE_KEYS.intersection(_field_names(f.type)) for f in schema):
        return True
    text = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    if not text:
        return False
    for batch in batches:
        for name in text:
            if pc.any(pc.match_substring_regex(batch.column(name), IMAGE_KEY_PATTERN)).as_py():
                return True
    return False
