"""`registry.Registry`, the one registry style (readers, writers, backend specs): things registered in place or
by where they live (imported on first lookup), each checked against the registry's base class."""

from __future__ import annotations

import sys

import pytest

from openjev_batch.errors import OpenjevError as Base  # any package class serves as the plugs' base
from openjev_batch.registry import Registry


def test_a_lazy_entry_is_imported_on_first_lookup_and_checked(tmp_path, monkeypatch):
    (tmp_path / "far_plug.py").write_text(
        "from openjev_batch.errors import OpenjevError as Base\nclass Far(Base):\n    pass\nclass Stray:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("far_plug", None)
    reg: Registry[type[Base]] = Registry("plug", base=Base)
    reg.lazy("far", "far_plug:Far")
    reg.lazy("stray", "far_plug:Stray")
    assert "far" in reg and list(reg) == ["far", "stray"]
    assert "far_plug" not in sys.modules  # registering imports nothing
    assert reg["far"].__name__ == "Far" and "far_plug" in sys.modules
    with pytest.raises(TypeError, match="plug 'stray': .* is not a OpenjevError"):
        reg["stray"]
    with pytest.raises(KeyError, match="unknown plug 'near'; known: far, stray"):
        reg["near"]
    sys.modules.pop("far_plug", None)


def test_register_checks_the_base_and_refuses_a_name_twice():
    reg: Registry[type[Base]] = Registry("plug", base=Base)

    @reg.register("a")
    class A(Base):
        pass

    assert reg["a"] is A and reg.items() == [("a", A)]
    with pytest.raises(ValueError, match="plug 'a' registered twice"):
        reg.register("a")(A)
    with pytest.raises(TypeError, match="is not a OpenjevError"):
        reg.register("b")(int)
    with pytest.raises(ValueError, match="registered twice"):
        reg.lazy("a", "x:A")


def test_a_lazy_module_that_registers_itself_fills_its_placeholder(tmp_path, monkeypatch):
    reg: Registry[type[Base]] = Registry("plug", base=Base)
    monkeypatch.setitem(sys.modules, "the_reg", type(sys)("the_reg"))
    sys.modules["the_reg"].REG = reg  # type: ignore[attr-defined]
    (tmp_path / "self_plug.py").write_text(
        "from openjev_batch.errors import OpenjevError as Base\nfrom the_reg import REG\n@REG.register('me')\nclass Me(Base):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg.lazy("me", "self_plug:Me")
    assert reg["me"].__name__ == "Me"
    sys.modules.pop("self_plug", None)


def test_a_base_named_by_where_it_lives_is_imported_at_the_first_check():
    """readouts/ names its base so (readouts.base imports pyarrow, the registry's face must not)."""
    reg: Registry[type[Base]] = Registry("plug", base="openjev_batch.errors:OpenjevError")
    assert reg.base == "openjev_batch.errors:OpenjevError"
    reg.register("ok")(type("Ok", (Base,), {}))
    assert reg.base is Base
    with pytest.raises(TypeError, match="is not a OpenjevError"):
        reg.register("no")(ValueError)


def test_every_plug_registry_checks_its_base():
    """One style serves readouts, backends, input readers and output writers: each checked against its base."""
    from openjev_batch.backends import SPECS
    from openjev_batch.pipeline.input.formats.base import READERS
    from openjev_batch.pipeline.output.writers.base import WRITERS
    from openjev_batch.readouts import READOUTS

    for reg in (READOUTS, SPECS, READERS, WRITERS):
        assert isinstance(reg, Registry) and reg.base is not None, reg.what
        assert all(reg[name] is not None for name in reg)  # every lazy entry loads and passes its check
