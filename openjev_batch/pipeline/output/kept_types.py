"""The type of a kept column from JSONL input (no schema): the type every value agrees on — ints and floats →
double, structs merged field by field, lists by element — else None, and the column is written as JSON
text. Each part records its values' type in its metadata (`encode_type`), and the join folds the parts'
types (`unify_types` is associative with null as identity), so the column's type never depends on where the
chunks were cut."""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa


def unify_types(a: pa.DataType | None, b: pa.DataType | None) -> pa.DataType | None:
    """The type both `a` and `b` values fit, or None (no common type: the column is written as text).
    Associative, with null as identity, so folding it over values gives one answer for any chunking."""
    if a is None or b is None:
        return None
    if a == b or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    num = (pa.int64(), pa.float64())
    if a in num and b in num:
        return pa.float64()
    if pa.types.is_list(a) and pa.types.is_list(b):
        t = unify_types(a.value_type, b.value_type)
        return None if t is None else pa.list_(t)
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = unify_types(fields[f.name], f.type) if f.name in fields else f.type
            if fields[f.name] is None:
                return None
        return pa.struct(list(fields.items()))
    return None


def value_type(v: Any) -> pa.DataType | None:
    """Arrow's inferred type of one JSON value (None when Arrow cannot hold it, e.g. an int ≥ 2**63)."""
    try:
        return pa.array([v]).type
    except Exception:
        return None


def encode_type(t: pa.DataType | None) -> str | None:
    """A type as text for a part's metadata (an Arrow IPC schema, base64); None (no common type) stays."""
    return None if t is None else base64.b64encode(pa.schema([("t", t)]).serialize().to_pybytes()).decode()


def decode_type(s: str | None) -> pa.DataType | None:
    """`encode_type` read back."""
    return None if s is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(s))).field("t").type


def as_text(v: Any) -> str | None:
    """A value of a column with no common type, as the text written (a string as it is, else JSON)."""
    return v if v is None or isinstance(v, str) else json.dumps(v)
