"""A tiny random **dense** vision-language model for the CPU sglang engine (issue 33): Qwen3-VL. The Qwen3.5 VL
model of tests/tiny.py is a hybrid whose linear-attention layers need sgl_kernel's CPU build (not on PyPI:
`srt/layers/attention/linear/gdn_backend.py:68` imports `sgl_kernel.mamba`'s CPU kernels), so the sglang CPU
engine cannot run it; Qwen3-VL has Qwen3.5's vision tower family, image processor, image markup and
interleaved M-RoPE, over plain attention layers, and both go through sglang's one Qwen-VL image processor."""

from __future__ import annotations

import tiny  # noqa: F401 - puts scripts/ on sys.path
from make_test_vl_model import make_tiny_qwen3_vl  # noqa: F401 - built where a user builds it (the script)
