"""openjev_batch/backends/sglang/kwargs.py and sglang/__init__.py: what counts as an installed sglang."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest

from openjev_batch.backends import default_backend
from openjev_batch.backends.sglang import installed
from openjev_batch.backends.sglang.kwargs import import_sglang
from openjev_batch.errors import BackendError


@pytest.fixture
def folder_named_sglang(tmp_path, monkeypatch):
    """What `import sglang` gives where sglang is not installed but a folder of that name is on sys.path (a clone
    in the working folder under `python -m`; CI's plain install, where pytest puts tests/backends/ on it): a
    namespace package, no __file__, a spec without origin."""
    (tmp_path / "sglang").mkdir()
    spec = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "sglang")]
    mod = types.ModuleType("sglang")
    mod.__spec__, mod.__path__ = spec, [str(tmp_path / "sglang")]
    monkeypatch.setitem(sys.modules, "sglang", mod)
    return tmp_path / "sglang"


def test_a_folder_named_sglang_is_not_sglang(folder_named_sglang):
    assert installed() is False
    assert default_backend() == "hf"
    with pytest.raises(BackendError, match=f"'sglang' here is the folder {folder_named_sglang}, not the package"):
        import_sglang()


def test_the_installed_sglang_is_sglang():
    pytest.importorskip("sglang.srt")
    assert installed() is True
    assert import_sglang().__version__
