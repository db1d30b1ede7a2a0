"""The sglang engine's kernel warm-up, before the user's job (`SGLangBackend` runs one at start; `backend` is the
started backend: its engine, tokenizer, pack and context budgets). A warm-up is an optimisation: a failure other
than the engine's death is a warning, and the job then compiles as it goes."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...errors import BackendError
from . import mis, requests
from .patterns import multi_item

# the engine's logger: the warning is the engine's, where a user's log filter already looks
log = logging.getLogger("openjev_batch.backends.sglang.engine")

# Warm-up forwards (requests × tokens): Triton compiles a kernel per config, and fused-MoE and the
# linear-attention kernels pick their config by the batch's token count. Measured on the H200 (35B-A3B
# shape, docs/benchmarks.md run 5): a cold Triton cache costs ~60 s of compile on the first job's batches;
# sizes up to the 32k prefill budget cover a job's shapes, so the compile happens here, before the
# user's job, and is reported apart (`startup`). Triton keeps what it compiled on disk
# (~/.triton/cache, TRITON_CACHE_DIR), so a second night's engine warms up in seconds.
WARMUP_SHAPES = ((4, 64), (64, 128), (32, 500), (16, 2048), (1, 8192), (64, 400))


def kernels(backend: Any) -> float:
    """The dense/prefix-first engine's warm-up (seconds): `WARMUP_SHAPES` as plain prefills."""
    t = time.perf_counter()
    tok = int(backend.tokenizer.eos_token_id or 0)
    budget = int(backend.pack_tokens or 16_384)
    try:
        for n, length in WARMUP_SHAPES:
            length = min(length, max(1, (backend.context_length or length) - 1))
            n = max(1, min(n, budget // max(1, length)))
            requests.generate(
                backend.engine,
                [[tok] * length for _ in range(n)],
                [[0] for _ in range(n)],
                backend.max_new_tokens,
            )
        backend.engine.flush_cache()
    except BackendError:
        backend.close()  # the engine died during its warm-up: no engine process is left behind
        raise
    except Exception as e:  # noqa: BLE001 - a warm-up is an optimisation: the job then compiles as it goes
        log.warning(
            "sglang kernel warm-up stopped (%s: %s); the job compiles as it goes", type(e).__name__, e
        )
    return round(time.perf_counter() - t, 1)


# A multi-item engine's kernels (flashinfer's multi-item prefill, which JIT-compiles on a fresh machine: 78 s
# inside the first job on an H200, issue 30; the GDN fork's varlen kernels; fused MoE per token count): packs
# of a prefix and N items at the job shapes, up to the pack budget. (packs, prefix, items, item tokens)
WARMUP_PACKS = ((4, 64, 3, 16), (16, 300, 3, 40), (8, 1000, 8, 40), (2, 2000, 16, 60), (64, 300, 3, 40))


def multi_item_kernels(backend: Any) -> float:
    """A multi-item engine's warm-up (seconds): `WARMUP_PACKS`."""
    t = time.perf_counter()
    tok = int(backend.tokenizer.eos_token_id or 0)
    budget = int(backend.pack_tokens or 16_384)
    try:
        for n, prefix, k, item in WARMUP_PACKS:
            packs = []
            for _ in range(n):
                ids, delims = mis.build([tok] * prefix, [[tok] * item] * k, backend.delimiter_id)
                if len(ids) > budget:
                    break
                packs.append(mis.Pack(ids, delims, (tok,), tuple((0, j) for j in range(k)), prefix))
            if packs:
                requests.wait(backend.engine, multi_item.generate(backend.engine, packs))
    except BackendError:
        backend.close()
        raise
    except Exception as e:  # noqa: BLE001 - an optimisation only: the job then compiles as it goes
        log.warning(
            "sglang multi-item warm-up stopped (%s: %s); the job compiles as it goes", type(e).__name__, e
        )
    return round(time.perf_counter() - t, 1)
