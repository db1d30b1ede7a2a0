"""A sync-free label-logprob gather for sglang's scheduler process (workaround for sgl-project/sglang#39642).

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
in tests/backends/test_scheduler_patch.py runs sglang's own gather and consumer on both). Measured effect:
not yet (benchmarks/gpu.sh issue19b measures it against the stock readback in one run).

The idle tree check (`idle-check`): sglang 0.5.17 runs `SchedulerInvariantChecker._check_tree_cache` (a walk
of the whole radix tree, `UnifiedRadixCache.sanity_check`) every time the scheduler is fully idle, and for a
hybrid (mamba) model always. A prefix-first job leaves the scheduler idle between request batches, and the tree
holds every cached prefix: py-spy on the H200 (35B-A3B shape, W3 5,000 tickets, docs/benchmarks.md run 5) put
20 % of the scheduler's samples there, on the path between two batches. It is a debug invariant (it only logs
a leak); the product runs it at most once every `IDLE_CHECK_INTERVAL_S`.

The state-slot allocation (`alloc`): a hybrid (recurrent-state) engine allocates a state slot for every new
request in `HybridReqToTokenPool.alloc` (0.5.17 `mem_cache/memory_pool.py:1336`) and records it with
`req_index_to_mamba_index_mapping[select_index] = …`, where `select_index` is a Python list: torch turns it
into a pageable host tensor whose copy to the GPU blocks the host until the scheduler's stream has run, and
that stream waits on the forward just launched (the scheduler's WAR barrier). So the scheduler cannot build
batch k+1 while batch k runs; under multi-item scoring every request is new, so every batch pays it. py-spy on
the H100 (issue 38, W3 on the 35B-A3B shape): 14 % of the scheduler's samples on that line. The patch makes
that one index a pinned tensor copied without blocking, on the same stream (same order, same values); the rest
of sglang's `alloc` runs unchanged.

Each patch installs only where sglang has the structure it replaces and is otherwise a no-op (sglang's own
path runs, only slower); `--sglang-patches` chooses them (all | gather | readback | none) to measure them.
Which ran is logged once per scheduler process (level info: `--engine-arg log_level=info` shows it; a
requested patch this sglang has no place for is a warning).

This module is imported in sglang's spawned scheduler process: it must stay light (torch only, lazily).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from . import gpu_profile
from .scheduler_errors import report_failures

log = logging.getLogger(__name__)

# the --sglang-patches choices (options.py validates against these keys)
PATCH_SETS: dict[str, tuple[str, ...]] = {
    # `alloc` is opt-in until a GPU run measures it (issue 38: the one device call of 2026-12-05 never got past
    # engine start); `all` stays the set the benchmarks measured
    "all": ("gather", "readback", "idle-check"),
    "with-alloc": ("gather", "readback", "idle-check", "alloc"),
    "gather": ("gather",),
    "readback": ("readback",),
    "none": (),
}


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
    stock = cls.copy_to_cpu
    if getattr(stock, "_openjev_readback", False):
        return True
    logged: set[str] = set()  # each message once per scheduler process

    @functools.wraps(stock)
    def copy_to_cpu(self, *args: Any, **kwargs: Any) -> Any:
        out = getattr(self, "logits_output", None)
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

    copy_to_cpu._openjev_readback = True  # type: ignore[attr-defined]
    cls.copy_to_cpu = copy_to_cpu
    return True


def apply() -> bool:
    """Install the gather in this process's sglang. Returns False (and changes nothing) when the sglang
    installed has no such function, e.g. a release where the readout moved or the upstream fix landed."""
    import importlib

    try:
        lp = importlib.import_module("sglang.srt.layers.logprob_processor")
    except ImportError:  # a release without this module: its own readout runs
        return False
    if not callable(getattr(lp, "get_token_ids_logprobs_batch_optimized", None)):
        return False
    # compute_logprobs_only looks the name up in the module at call time, so rebinding it is enough.
    lp.get_token_ids_logprobs_batch_optimized = token_ids_logprobs_no_sync
    return True


IDLE_CHECK_INTERVAL_S = 30.0


def apply_idle_check(interval_s: float = IDLE_CHECK_INTERVAL_S) -> bool:
    """Run sglang's idle radix-tree sanity check at most once every `interval_s` seconds in this process.
    Returns False (and changes nothing) where sglang has no `SchedulerInvariantChecker._check_tree_cache`."""
    import importlib
    import time

    try:
        ic = importlib.import_module("sglang.srt.managers.scheduler_components.invariant_checker")
    except ImportError:
        return False
    cls = getattr(ic, "SchedulerInvariantChecker", None)
    stock = getattr(cls, "_check_tree_cache", None)
    if not callable(stock):
        return False
    if getattr(stock, "_openjev_idle", False):
        return True
    last = [float("-inf")]

    @functools.wraps(stock)
    def _check_tree_cache(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if now - last[0] < interval_s:
            return None
        last[0] = now
        return stock(self, *args, **kwargs)

    _check_tree_cache._openjev_idle = True  # type: ignore[attr-defined]
    cls._check_tree_cache = _check_tree_cache
    return True


class _PinnedIndex:
    """A view of a CUDA tensor whose `t[list] = value` sends the index from pinned memory without blocking
    (torch's own path copies a pageable host tensor, which waits for the stream). Reads and every other index
    go to the tensor itself."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any):
        self.tensor = tensor

    def __setitem__(self, index: Any, value: Any) -> None:
        import torch

        t = self.tensor
        if isinstance(index, list) and t.is_cuda:
            index = torch.tensor(index, dtype=torch.int64, pin_memory=True).to(t.device, non_blocking=True)
        t[index] = value

    def __getitem__(self, index: Any) -> Any:
        return self.tensor[index]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tensor, name)


ALLOC_MAPPINGS = ("req_index_to_mamba_index_mapping", "req_index_to_mamba_ping_pong_track_buffer_mapping")


def alloc_target():
    """sglang's `HybridReqToTokenPool` where the allocation patch fits (an `alloc` method; the mapping tensors
    are instance attributes set at init), else None. Changes nothing."""
    import importlib

    try:
        mp = importlib.import_module("sglang.srt.mem_cache.memory_pool")
    except ImportError:
        return None
    cls = getattr(mp, "HybridReqToTokenPool", None)
    return cls if callable(getattr(cls, "alloc", None)) else None


def apply_alloc() -> bool:
    """Wrap sglang's `HybridReqToTokenPool.alloc` so that its slot-mapping writes do not block the host
    (`_PinnedIndex`). Returns False (and changes nothing) where sglang has no such class or method."""
    cls = alloc_target()
    if cls is None:
        return False
    stock = cls.alloc
    if getattr(stock, "_openjev_alloc", False):
        return True

    @functools.wraps(stock)
    def alloc(self, *args: Any, **kwargs: Any) -> Any:
        own = self.__dict__
        swapped = {n: own[n] for n in ALLOC_MAPPINGS if getattr(own.get(n), "is_cuda", False)}
        for n, t in swapped.items():
            own[n] = _PinnedIndex(t)
        try:
            return stock(self, *args, **kwargs)
        finally:
            own.update(swapped)

    alloc._openjev_alloc = True  # type: ignore[attr-defined]
    cls.alloc = alloc
    return True


INSTALLERS = {"gather": apply, "readback": apply_readback, "idle-check": apply_idle_check, "alloc": apply_alloc}


def install(patches: tuple[str, ...] = PATCH_SETS["all"]) -> dict[str, bool]:
    """Install these patches in this process; logs once which are active. Returns {patch: installed}.
    Also starts the GPU timeline profile when `gpu_profile.ENV` asks for one (a diagnosis, never a default)."""
    done = {name: INSTALLERS[name]() for name in patches}
    gpu_profile.install_from_env()
    off = [n for n in PATCH_SETS["with-alloc"] if n not in patches]
    log.info(
        "openjev-batch scheduler patches: %s",
        ", ".join(
            [f"{n}={'on' if ok else 'not in this sglang'}" for n, ok in done.items()]
            + [f"{n}=off" for n in off]
        ),
    )
    for n, ok in done.items():
        if not ok:
            log.warning("openjev-batch: this sglang has no place for the %s patch; its own path runs", n)
    return done


def run_scheduler_process_with(patches: tuple[str, ...], *args: Any, **kwargs: Any) -> Any:
    """sglang's scheduler process entry point with `patches` installed first (spawned by reference)."""
    install(patches)
    report_failures()
    from sglang.srt.managers.scheduler import run_scheduler_process as run

    return run(*args, **kwargs)


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """The scheduler entry point with every patch (the product's default)."""
    return run_scheduler_process_with(PATCH_SETS["all"], *args, **kwargs)


def engine_class(patches: str = "all"):
    """`sglang.Engine` whose scheduler processes install `patches` (a PATCH_SETS key); plain
    `sglang.Engine` on a release without the `run_scheduler_process_func` hook (then sglang's own readout
    runs, only slower)."""
    # The class itself: `sglang.Engine` is a lazy-import proxy that cannot be subclassed.
    from sglang.srt.entrypoints.engine import Engine as SGLangEngine

    if not hasattr(SGLangEngine, "run_scheduler_process_func"):
        return SGLangEngine
    names = PATCH_SETS[patches]
    # A module function (or a partial of one) pickles by reference into the spawned scheduler processes.
    func = (
        run_scheduler_process
        if names == PATCH_SETS["all"]
        else functools.partial(run_scheduler_process_with, names)
    )

    class Engine(SGLangEngine):
        run_scheduler_process_func = staticmethod(func)

    return Engine
