"""The engine's attention kernel where sglang's own choice is missing here (backends/sglang/attention.py).

sglang 0.5.17 gives a Hopper card FlashAttention-3 for the language model by default and never checks that
sgl_kernel has it: on the kit's slim build, `classify` on a Qwen3.5 checkpoint died at engine start with
"ImportError: Can not import FA3 in sgl_kernel" (H200, 2026-12-06). The CPU cannot start a CUDA engine, so the
choice is proved as a function and through `engine_kwargs` with the card's answers given."""

from __future__ import annotations

import pytest

from openjev_batch.backends.base import BackendOptions
from openjev_batch.backends.sglang import attention as sa
from openjev_batch.backends.sglang import kwargs as sk

NO_FA3 = "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."


def test_a_hopper_without_fa3_gets_flashinfer_and_says_why():
    backend, words = sa.choose_text_attention((9, 0), lambda: NO_FA3)
    assert backend == "flashinfer"
    assert words == f"attention flashinfer (no FA3 in sgl_kernel: {NO_FA3})"


def test_sglang_keeps_its_own_choice_where_it_has_the_kernels():
    assert sa.choose_text_attention((9, 0), lambda: None) == (None, "")  # FA3 imports: sglang takes it
    asked = []
    # any other card: sglang's default is not FA3 (flashinfer or triton), so FA3 is not even looked for
    for cap in ((8, 0), (8, 9), (10, 0), None):
        assert sa.choose_text_attention(cap, lambda: asked.append(1) or NO_FA3) == (None, "")
    assert asked == []


def test_fa3_imports_says_why_not_on_this_machine():
    why = sa.fa3_imports()
    assert why is not None and why.split(":")[0].endswith("Error")


@pytest.mark.sglang
def test_engine_kwargs_set_it_unless_the_user_chose(tiny_model, monkeypatch):
    """On a (pretended) Hopper card without FA3 the engine is started with flashinfer and the run summary's
    words; the user's --attention-backend or --engine-arg attention_backend wins; a card with FA3 is left to
    sglang."""
    pytest.importorskip("sglang.srt")
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(sk, "gpu_prefill_defaults", lambda fields=(): {"disable_cuda_graph": True})
    monkeypatch.setattr(sa, "fa3_imports", lambda: NO_FA3)
    kw = sk.engine_kwargs(BackendOptions(model=str(tiny_model), device="cuda"))
    assert kw["attention_backend"] == "flashinfer" and "no FA3 in sgl_kernel" in kw.attention
    kw = sk.engine_kwargs(BackendOptions(model=str(tiny_model), device="cuda", attention_backend="triton"))
    assert kw["attention_backend"] == "triton" and kw.attention == ""
    kw = sk.engine_kwargs(
        BackendOptions(model=str(tiny_model), device="cuda", engine_args={"attention_backend": "fa3"}),
    )
    assert kw["attention_backend"] == "fa3" and kw.attention == ""
    monkeypatch.setattr(sa, "fa3_imports", lambda: None)
    kw = sk.engine_kwargs(BackendOptions(model=str(tiny_model), device="cuda"))
    assert "attention_backend" not in kw and kw.attention == ""
