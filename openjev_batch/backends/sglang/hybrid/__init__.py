"""An external model package for sglang: exact multi-item scoring on the Qwen3.5/3.6 hybrids.

sglang loads it in its scheduler process when ``SGLANG_EXTERNAL_MODEL_PACKAGE=openjev_batch.backends.sglang.hybrid``
(``sglang/srt/models/registry.py``: every submodule is imported and each ``EntryClass`` registered under its class
``__name__`` with ``overwrite=True``). The label-logprobs sglang backend sets it only while an engine that runs
multi-item scoring on one of ``mis.FORK_ARCHITECTURES`` starts, then asks the engine for ``MARKER`` to prove the override
loaded (the stock classes answer None).

Why: sglang 0.5.17's multi-item scoring runs the gated-delta-net recurrence straight through
``prefix D item_1 D item_2 …`` (sgl-project/sglang#31969), and rotates every item by its packed M-RoPE position, so
item k's answer depends on items 1…k−1. The classes here (qwen3_5_mis.py) fork the recurrent state at the prefix end
for each item with the delimiters left out, and give M-RoPE the per-item positions flashinfer already computed. The
design, with file:line references into sglang 0.5.17: ``shared/research/hybrid-multi-item.md``. The segment plan is
pure Python (``mis.fork_segments``) and tested on the CPU; the kernels run on a CUDA GPU only
(``benchmarks/hybrid_mis_exact_gpu.py`` proves exactness there).

This ``__init__`` imports neither sglang nor torch.
"""

from __future__ import annotations

PACKAGE = __name__
MARKER = "openjev_batch.hybrid_mis"
FORK_VERSION = 1.0
# Negative controls for the exactness benchmark only (never set by the product): "no-mrope" skips the position fix,
# "keep-delimiter" lets each item's recurrence start at its delimiter (sglang 0.5.20's semantics).
CONTROL_ENV = "OPENJEV_MIS_CONTROL"
