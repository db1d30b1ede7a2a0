"""The attention kernels an sglang engine is started with where sglang's own choice is missing here: sglang
picks FlashAttention-3 on a Hopper card without checking that sgl_kernel has it (the language model's attention
here; the vision tower's in vision_kwargs.py)."""

from __future__ import annotations


def fa3_imports() -> str | None:
    """None when sgl_kernel's FlashAttention-3 imports here, else why not."""
    try:
        import sgl_kernel.flash_attn  # noqa: F401  # lazy: loads the CUDA kernels
    except Exception as e:  # noqa: BLE001 - ImportError, or a kernel library that fails to load
        return f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return None


# sglang 0.5.17 gives a Hopper card FlashAttention-3 for the language model's attention by default (server_args
# `_get_default_attn_backend`, "flashinfer 0.6.1 caused performance regression on Hopper", sgl-project/sglang#17411)
# without checking that its kernels exist: with a slim sgl_kernel (the kit's has no `flash_ops`) the scheduler
# dies at start with "ImportError: Can not import FA3 in sgl_kernel" (H200, 2026-12-06: `classify` on a Qwen3.5
# checkpoint, the one engine the product started with no attention backend of its own; the label engine's
# multi-item choice sets flashinfer). flashinfer, sglang's default on the other CUDA cards, runs there.
TEXT_ATTENTION_FALLBACK = "flashinfer"


def choose_text_attention(capability: tuple[int, int] | None, fa3_error) -> tuple[str | None, str]:
    """(attention_backend to set or None for sglang's own choice, the choice in words: '' for sglang's own) on a
    CUDA card of `capability` (major, minor) where the user set none; `fa3_error()`: None when FA3 imports,
    else why not (called only where sglang would take FA3)."""
    if capability is None or capability[0] != 9:
        return None, ""
    why = fa3_error()
    if why is None:
        return None, ""
    return TEXT_ATTENTION_FALLBACK, f"attention {TEXT_ATTENTION_FALLBACK} (no FA3 in sgl_kernel: {why})"


def cuda_capability() -> tuple[int, int] | None:
    """This machine's first CUDA card's (major, minor), None without one."""
    import torch  # lazy

    return tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None  # type: ignore[return-value]


def text_attention(kw: dict) -> str:
    """Set `kw["attention_backend"]` (an engine on this machine's CUDA card, the user having chosen none) where
    sglang's own choice is missing here; returns the choice in words ('' for sglang's own)."""
    backend, words = choose_text_attention(cuda_capability(), fa3_imports)
    if backend is not None:
        kw["attention_backend"] = backend
    return words
