"""Kept-column types from JSONL values (pipeline/output/kept_types.py): pure; through the store and the join in
test_store.py."""

import pyarrow as pa

from openjev_batch.pipeline.output.kept_types import (
    as_text,
    decode_type,
    encode_type,
    unify_types,
    value_type,
)


def test_unify_types_is_the_type_every_value_agrees_on():
    vals = [1, None, 2.5, [1], {"a": 1}]
    assert unify_types(value_type(1), value_type(2.5)) == pa.float64()
    assert unify_types(value_type([]), value_type([2.5])) == pa.list_(pa.float64())
    assert unify_types(value_type(True), value_type(1)) is None
    assert unify_types(value_type(2**63), value_type(1)) is None
    assert unify_types(value_type("a"), value_type(None)) == pa.string()
    assert value_type(vals[3]) == pa.list_(pa.int64())


def test_a_type_survives_the_parts_metadata_and_text_keeps_strings():
    t = pa.struct([("a", pa.list_(pa.float64())), ("b", pa.string())])
    assert decode_type(encode_type(t)) == t and encode_type(None) is None and decode_type(None) is None
    assert as_text("x") == "x" and as_text({"a": [1]}) == '{"a": [1]}' and as_text(None) is None
