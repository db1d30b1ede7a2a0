"""The `readback` patch: multi-item scoring's label logprobs copied to the host without blocking.

The multi-item readback (`readback`, the same class of stall): with `enable_mis`, sglang (0.5.17–0.5.19,
`layers/logits_processor.compute_logprobs_for_multi_item_scoring`) leaves the label logprobs at the delimiter
positions (`input_token_ids_logprobs_val`, one [items, labels] tensor per request) on the GPU, and
`managers/utils.GenerationBatchResult.copy_to_cpu` copies the other logprob fields but not that one. The
scheduler's `_process_input_token_ids_logprobs` (`scheduler_components/logprob_result_processor.py:137`)
then calls `.tolist()` on each: a blocking copy that waits for the forward launched after this batch.
py-spy on the H200 put 59 % of the scheduler's samples on multi-item W2 there
(profiles/issue19_multi_item_w2.prof.gz, docs/benchmarks.md run d). The product starts one pinned,
non-blocking copy of all of a batch's such tensors inside `copy_to_cpu` (before sglang records `copy_done`,
which the result processor waits on), so `.tolist()` reads host memory. Same values (a bitwise copy; the test
in tests/backends/sglang/test_scheduler_patch.py runs sglang's own gather and consumer on both). Measured effect:
not yet (benchmarks/gpu.sh issue19b measures it against the stock readback in one run).
"""

from __future__ import annotations

import logging
from typing import Any

from . import wrap_method

log = logging.getLogger(__name__)


def host_copy_token_ids_logprobs(vals: list | None, *, cpu_too: bool = False) -> list | None:
    """Start the host copy of the CUDA tensors in `vals` (`input_token_ids_logprobs_val`: per request a
    [positions, ids] tensor, or a list) as one pinned, non-blocking copy on the current stream. Returns the
    list with each such tensor replaced by a host view of the same shape, dtype and values (ready once the
    stream has run the copy: sglang's `copy_done` event), or None when there is nothing to copy.
    `cpu_too`: copy CPU tensors as well (the test's way to run the packing without a GPU)."""
    import torch

    if not isinstance(vals, list):
        return None
    picks = [
        i
        for i, v in enumerate(vals)
        if torch.is_tensor(v) and (v.is_cuda or (cpu_too and v.device.type == "cpu"))
    ]
    if not picks:
        return None
    srcs = [vals[i] for i in picks]
    first = srcs[0]
    if any(s.device != first.device or s.dtype != first.dtype for s in srcs):
        return None  # never seen (one logprobs tensor feeds them all): sglang's own readback then
    # One device buffer, one copy: a forward carries up to hundreds of requests.
    flat = torch.cat([s.reshape(-1) for s in srcs]) if len(srcs) > 1 else first.reshape(-1)
    if flat.is_cuda:
        host = torch.empty(flat.shape, dtype=flat.dtype, pin_memory=True)  # pageable memory would block
        host.copy_(flat, non_blocking=True)
        # The sources were made on the forward stream and may be freed once replaced below: record_stream
        # keeps their memory from reuse until this stream has run (as sglang's own `_async_d2h` does).
        # `flat` belongs to this stream already.
        stream = torch.cuda.current_stream(flat.device)
        for s in srcs:
            s.record_stream(stream)
    else:
        host = flat.clone()
    out = list(vals)
    offset = 0
    for i, s in zip(picks, srcs, strict=True):
        out[i] = host[offset : offset + s.numel()].view(s.shape)
        offset += s.numel()
    return out


def readback_target():
    """sglang's `GenerationBatchResult` class where the readback patch fits (it has `copy_to_cpu` and its
    logits output has `input_token_ids_logprobs_val`), else None. Changes nothing."""
    import dataclasses
    import importlib

    try:
        utils = importlib.import_module("sglang.srt.managers.utils")
        lpo = importlib.import_module("sglang.srt.layers.logits_processor").LogitsProcessorOutput
        fields = {f.name for f in dataclasses.fields(lpo)}
    except (ImportError, AttributeError, TypeError):
        return None
    cls = getattr(utils, "GenerationBatchResult", None)
    if not callable(getattr(cls, "copy_to_cpu", None)) or "input_token_ids_logprobs_val" not in fields:
        return None
    return cls


def apply_readback() -> bool:
    """Wrap sglang's `GenerationBatchResult.copy_to_cpu` so that it also starts the host copy of
    `input_token_ids_logprobs_val` (multi-item scoring's label logprobs). Returns False (and changes nothing)
    where sglang has no such method or no such field (`readback_target`)."""
    cls = readback_target()
    if cls is None:
        return False
    logged: set[str] = set()  # each message once per scheduler process

    def make(stock: Any) -> Any:
        def copy_to_cpu(self, *args: Any, **kwargs: Any) -> Any:
            out: Any = getattr(self, "logits_output", None)
            try:
                host = host_copy_token_ids_logprobs(getattr(out, "input_token_ids_logprobs_val", None))
            except Exception as e:  # noqa: BLE001 - never the scheduler's end: sglang's own readback then
                host = None
                if "failed" not in logged:
                    logged.add("failed")
                    log.warning(
                        "openjev-batch readback patch failed (%s: %s); sglang's own readback runs",
                        type(e).__name__,
                        e,
                    )
            if host is not None:
                out.input_token_ids_logprobs_val = host
                if "active" not in logged:
                    logged.add("active")
                    log.info("openjev-batch: multi-item label logprobs copied to the host without blocking")
            return stock(self, *args, **kwargs)  # records copy_done after the copy above

        return copy_to_cpu

    return wrap_method(cls, "copy_to_cpu", "_openjev_readback", make)

