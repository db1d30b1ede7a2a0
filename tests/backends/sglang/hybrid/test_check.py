"""The load-time check of the sglang names the Qwen3.5/3.6 fork touches (backends/sglang/hybrid/check.py), under the
CI's real sglang (the CPU build, 0.5.19): the override module imports and its check passes; a name removed from or
re-signed on a real sglang object makes the check fail naming it; the release tool's source reader
(scripts/check_sglang_release.py, not in the wheel) finds the same on a copy of the installed sglang's own files with
one name edited out."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytest.importorskip("sglang.srt")

from openjev_batch.backends.sglang import fork_releases, mis  # noqa: E402
from openjev_batch.backends.sglang.hybrid import check  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import check_sglang_release as release_tool  # noqa: E402

# builds or runs a model, or imports sglang, in this process: minutes under load (issue 48.10), so in the
# full set only (tests/conftest.py)
pytestmark = pytest.mark.heavy


@pytest.fixture(autouse=True)
def _not_the_cpu_engine(monkeypatch):
    """sglang's GDN kernels module picks its path at import from `is_cpu()` (SGLANG_USE_CPU_ENGINE, read once:
    lru_cache): the sglang engine fixtures set it in this process (tests/conftest.py), and with it set the import
    wants the CPU build's `sgl_kernel.mamba`, which the test shim lacks, and binds the CPU kernels, whose
    parameters the fork does not read (CI 2026-12-07: these tests failed only after an engine test in the same
    xdist worker). The check reads the names of sglang's default path: the switch off, its cached answer dropped
    (before and after, so later tests read the switch again)."""
    from sglang.srt.utils import common

    monkeypatch.delenv("SGLANG_USE_CPU_ENGINE", raising=False)
    common.is_cpu.cache_clear()
    yield
    monkeypatch.undo()
    common.is_cpu.cache_clear()


def test_the_override_module_imports_and_its_check_passes_under_the_installed_sglang():
    import importlib.metadata

    import openjev_batch.backends.sglang.hybrid.qwen3_5_mis as fork

    assert [c.__name__ for c in fork.EntryClass] == sorted(
        mis.FORK_ARCHITECTURES, key=[c.__name__ for c in fork.EntryClass].index
    )
    assert check.problems_installed() == []
    assert importlib.metadata.version("sglang") in fork_releases.FORK_SGLANG  # CI runs a release the fork serves


def test_a_missing_name_on_a_real_sglang_object_fails_the_check(monkeypatch):
    from sglang.srt.layers import radix_linear_attention as rla
    from sglang.srt.layers.attention.linear import gdn_backend

    monkeypatch.delattr(gdn_backend, "fused_gdn_gating")
    monkeypatch.delattr(rla.RadixLinearAttention, "forward")
    with pytest.raises(check.SglangMismatch) as e:
        check.check_installed()
    msg = str(e.value)
    assert "gdn_backend.fused_gdn_gating: missing" in msg
    # nn.Module's placeholder forward is left: the check sees the parameters gone
    assert "RadixLinearAttention.forward: no parameter(s) forward_batch, mixed_qkv, a, b" in msg
    assert "prefix-first" in msg  # the way out


def test_a_moved_parameter_fails_the_check(monkeypatch):
    from sglang.srt.layers.attention.linear import gdn_backend

    real = gdn_backend.causal_conv1d_fn

    def causal_conv1d_fn(x, weight, bias=None, conv_state=None, query_start_loc=None, **kwargs):  # renamed
        return real(x, weight, bias, **kwargs)

    monkeypatch.setattr(gdn_backend, "causal_conv1d_fn", causal_conv1d_fn)
    found = check.problems_installed()
    assert any("causal_conv1d_fn: no parameter(s) conv_states" in f for f in found), found


def test_a_method_gone_from_a_real_class_fails_the_check(monkeypatch):
    from sglang.srt.model_executor import forward_batch_info as fbi

    monkeypatch.delattr(fbi.ForwardBatch, "contains_image_inputs")
    found = check.problems_installed()
    assert any("ForwardBatch: no method(s) contains_image_inputs" in f for f in found), found


def test_the_source_reader_on_the_installed_tree_and_on_an_edited_copy(tmp_path):
    """Issue 49.4: the release tool reads uninstalled trees; it ships in scripts/, not in the package."""
    import sglang

    assert importlib.util.find_spec("openjev_batch.backends.sglang.hybrid.check_source") is None

    root = Path(sglang.__file__).parents[1]
    assert release_tool.problems_source(root) == []
    copy = tmp_path / "sglang"
    shutil.copytree(root / "sglang", copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.json"))
    f = copy / "srt" / "layers" / "radix_linear_attention.py"
    f.write_text(f.read_text().replace("self.dt_bias =", "self.dt_bias_moved ="))
    k = copy / "srt" / "layers" / "attention" / "linear" / "gdn_backend.py"
    k.write_text(
        k.read_text().replace(
            "query_start_loc: torch.Tensor,\n        **kwargs", "qsl: torch.Tensor,\n        **kwargs"
        )
    )
    found = release_tool.problems_source(tmp_path)
    assert any("RadixLinearAttention: no dt_bias" in x for x in found), found
    assert any("GDNKernelDispatcher.extend: no parameter(s) query_start_loc" in x for x in found), found
    assert release_tool.main([str(tmp_path)]) == 1


def test_fork_releases_and_the_verification_note():
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration"]}
    for v in fork_releases.FORK_SGLANG:
        assert mis.exactness(cfg, v) is None
    assert "serves sglang 0.5.17-0.5.23, not 0.5.24" in mis.exactness(cfg, "0.5.24")
    assert fork_releases.fork_note("0.5.17") == "sglang 0.5.17: exactness measured on a GPU"
    assert "load-checked" in fork_releases.fork_note("0.5.19") and "unused" not in fork_releases.fork_note("0.5.19")
    assert "unused" in fork_releases.fork_note("0.5.21")
