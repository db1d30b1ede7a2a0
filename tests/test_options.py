"""Each backend owns its options (options.py): the flat CLI/API keywords land in the owning backend's nested,
`extra="forbid"` type, read back flat as before; the resume key is unchanged; an option the chosen backend
does not read is refused (both ways), its default is not."""

from __future__ import annotations

import pytest

from openjev_batch.errors import ConfigError
from openjev_batch.options import ENGINE_OPTIONS, EngineOptions, HFOptions, SGLangOptions


def test_every_owned_option_is_a_field_of_its_backends_type_only():
    for o in ENGINE_OPTIONS:
        assert (o.name in SGLangOptions.model_fields) == (o.owner == "sglang"), o.name
        assert (o.name in HFOptions.model_fields) == (o.owner == "hf"), o.name
        assert (o.name in EngineOptions.model_fields) == (o.owner is None), o.name
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        SGLangOptions(batch_tokens=5)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        HFOptions(tp_size=2)


def test_flat_keywords_nest_and_read_back_flat():
    e = EngineOptions(tp_size=2, engine_args={"x": 1}, batch_tokens=5, device="cpu")
    assert e.sglang == SGLangOptions(tp_size=2, engine_args={"x": 1}) and e.hf == HFOptions(batch_tokens=5)
    assert (e.tp_size, e.engine_args, e.batch_tokens, e.device) == (2, {"x": 1}, 5, "cpu")
    assert e.backend_options("m").sglang == e.sglang  # what a backend is started with
    # the nested form, and a mix of both, as eval passes its options on
    assert EngineOptions(**{k: getattr(e, k) for k in EngineOptions.model_fields}) == e
    assert EngineOptions(sglang=SGLangOptions(dp_size=3), tp_size=2).sglang == SGLangOptions(
        tp_size=2, dp_size=3
    )
    c = e.model_copy(update={"tp_size": 4, "device": "cuda"})  # as the Ray runner and the tests copy
    assert (c.tp_size, c.engine_args, c.device, e.tp_size) == (4, {"x": 1}, "cuda", 2)
    # the resume key holds the same names and values as when the options were flat
    assert e.resume_key() == {"device": "cpu", "dtype": "auto", "tp_size": 2, "attention_backend": None,
                              "context_length": None, "engine_args": {"x": "1"}}  # fmt: skip
    with pytest.raises(ValueError, match="sglang.groups_per_window"):
        EngineOptions(groups_per_window=0)
    with pytest.raises(ValueError, match="nope"):
        EngineOptions(nope=1)


def test_an_option_the_backend_does_not_read_is_refused_both_ways():
    with pytest.raises(
        ConfigError, match=r"^the sglang backend does not read --batch-tokens \(hf only\); drop it$"
    ):
        EngineOptions(batch_tokens=5).check_backend("sglang")
    with pytest.raises(
        ConfigError,
        match=r"^the hf backend does not read --tp-size, --engine-arg a, b \(sglang only\); drop them$",
    ):
        EngineOptions(tp_size=2, engine_args={"b": 1, "a": 2}).check_backend("hf")
    EngineOptions(tp_size=2).check_backend("sglang")
    EngineOptions(batch_tokens=5).check_backend("hf")
    EngineOptions(batch_tokens=None, tp_size=1).check_backend("hf")  # defaults, as the CLI passes them
    EngineOptions(batch_tokens=None).check_backend("sglang")
