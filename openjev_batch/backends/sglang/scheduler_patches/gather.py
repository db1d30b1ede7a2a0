"""The `gather` patch: a sync-free label-logprob gather for sglang's scheduler process (workaround for
sgl-project/sglang#39642).

sglang (0.5.17–0.5.19, `layers/logprob_processor.get_token_ids_logprobs_batch_optimized`) builds the gather
indices of `token_ids_logprob` on the GPU and reads their lengths back with `.item()` and `.tolist()`. Each
is a CUDA stream synchronisation inside `run_batch`, so the scheduler waits there for the whole forward pass
before it can build the next batch: for prefill-only requests the overlap scheduler never overlaps anything.
py-spy on the H200 (docs/benchmarks.md): 73 % of the scheduler's time on W1 8B was that wait. The upstream
fix (sgl-project/sglang#39642) is still open, so the product installs the same gather with the lengths kept
on the host and the indices copied from pinned memory without blocking. Same values as sglang's function
(tests/test_backends.py compares the two). Measured on one H200 against the stock scheduler, same machine and
settings (benchmarks/results/2026-11-29c-h200-sync.md): W1 8B 9.41–9.90 → 9.06–9.52 s, W1 0.6B
2.91–3.26 → 2.16–2.69 s.
"""

from __future__ import annotations

from typing import Any


def token_ids_logprobs_no_sync(logprobs, token_ids_logprobs: list[list[int] | None]) -> tuple[list, list]:
    """Gather the requested token ids' logprobs per row without a host-device synchronisation.

    logprobs: [batch, vocab] float tensor (log-softmaxed next-token logits, any device).
    token_ids_logprobs: batch entries, each a list of vocabulary ids or None.
    Returns (values, ids): values[i] a 1-D tensor [len(ids_i)] on logprobs' device (empty for None or []),
    ids[i] the requested ids ([] for None); the contract of sglang's `get_token_ids_logprobs_batch_optimized`.
    """
    import torch

    lengths = [len(t or []) for t in token_ids_logprobs]  # host ints: nothing to read back from the GPU
    if sum(lengths) == 0:
        return [logprobs.new_empty(0) for _ in lengths], [[] for _ in lengths]
    rows = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))  # [total], host
    cols = torch.tensor([t for ids in token_ids_logprobs for t in (ids or [])], dtype=torch.long)  # [total]
    index = torch.stack([rows, cols])  # [2, total]
    if logprobs.is_cuda:
        # Pinned memory makes the copy truly asynchronous; torch's caching host allocator keeps the buffer
        # alive until the copy has run on the stream.
        index = index.pin_memory().to(logprobs.device, non_blocking=True)
    gathered = logprobs[index[0], index[1]]  # [total]
    split = torch.split_with_sizes(gathered, lengths)
    values = [split[i] if n else logprobs.new_empty(0) for i, n in enumerate(lengths)]
    ids = [list(t) if t else [] for t in token_ids_logprobs]
    return values, ids


def apply() -> bool:
    """Install the gather in this process's sglang. Returns False (and changes nothing) when the sglang
    installed has no such function, e.g. a release where the readout moved or the upstream fix landed."""
    import importlib

    try:
        lp: Any = importlib.import_module("sglang.srt.layers.logprob_processor")  # its names vary by release
    except ImportError:  # a release without this module: its own readout runs
        return False
    if not callable(getattr(lp, "get_token_ids_logprobs_batch_optimized", None)):
        return False
    # compute_logprobs_only looks the name up in the module at call time, so rebinding it is enough.
    lp.get_token_ids_logprobs_batch_optimized = token_ids_logprobs_no_sync
    return True
