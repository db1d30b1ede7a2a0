"""The multi-item readback patch (scheduler_patch.apply_readback, the sglang#39642 class of stall) against
sglang's own gather and consumer, on real tensors; which patches a scheduler installs; the option that
chooses them. The engine tests in test_backends.py run with every patch installed."""

import functools
import pickle
import re
from types import SimpleNamespace

import pytest
import torch

from openjev_batch.backends.sglang import scheduler_patch
from openjev_batch.backends.sglang.scheduler_patches import readback

# Per request: the label ids asked for and the number of its delimiter positions (multi-item items); a
# request without ids or without items gets [] from sglang's gather, the others a [items, ids] tensor.
LABEL_IDS = [[3, 5, 9], None, [1, 2], [4], [7, 8, 60, 61]]
ITEMS = [2, 1, 3, 0, 4]


def mis_outputs(dtype):
    """input_token_ids_logprobs_val / _idx exactly as sglang's multi-item path builds them
    (`compute_logprobs_for_multi_item_scoring` → `get_token_ids_logprobs_raw(..., no_copy_to_cpu=True)`)."""
    from sglang.srt.layers.logprob_processor import LogprobStage, get_token_ids_logprobs_raw

    g = torch.Generator().manual_seed(0)
    logprobs = torch.log_softmax(torch.randn(sum(ITEMS), 64, generator=g), -1).to(dtype)
    return get_token_ids_logprobs_raw(
        logprobs,
        LABEL_IDS,
        stage=LogprobStage.PREFILL,
        extend_logprob_pruned_lens_cpu=ITEMS,
        no_copy_to_cpu=True,
    )


def read_back(vals, idxs):
    """What sglang's scheduler makes of them: `_process_input_token_ids_logprobs` (the `.tolist()` the patch
    makes cheap) for a multi-item request, per request."""
    from sglang.srt.managers.scheduler_components.logprob_result_processor import (
        SchedulerLogprobResultProcessor,
    )

    # multi-item for this request: the predicate's name in 0.5.17–0.5.19 and in 0.5.23
    mis = SimpleNamespace(_is_multi_item_scoring=lambda req: True, _uses_scoring_positions=lambda req: True)
    out = []
    for ids, v, i in zip(LABEL_IDS, vals, idxs, strict=True):
        req = SimpleNamespace(
            logprob=SimpleNamespace(token_ids_logprob=ids),
            temp_input_token_ids_logprobs_val=[v],
            temp_input_token_ids_logprobs_idx=[i],
        )
        SchedulerLogprobResultProcessor._process_input_token_ids_logprobs(mis, req)
        out.append(getattr(req.logprob, "input_token_ids_logprobs_val", None))
    return out


def unwrapped(cls):
    """sglang's own `copy_to_cpu`, also where an earlier test in this process left the patch installed."""
    f = cls.copy_to_cpu
    return f.__wrapped__ if getattr(f, "_openjev_readback", False) else f


@pytest.mark.sglang
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_host_copy_reads_back_sglangs_values(dtype):
    pytest.importorskip("sglang.srt")
    vals, idxs = mis_outputs(dtype)
    assert [tuple(v.shape) if torch.is_tensor(v) else v for v in vals] == [(2, 3), [], (3, 2), [], (4, 4)]
    stock = read_back(vals, idxs)
    assert [len(x) if x is not None else None for x in stock] == [2, None, 3, 0, 4]

    host = scheduler_patch.host_copy_token_ids_logprobs(vals, cpu_too=True)  # the packing, without a GPU
    assert read_back(host, idxs) == stock
    for v, h in zip(vals, host, strict=True):
        if torch.is_tensor(v):  # a copy (one buffer for the batch), same shape and dtype
            assert h.shape == v.shape and h.dtype == v.dtype and h.data_ptr() != v.data_ptr()
        else:
            assert h is v
    assert len({h.untyped_storage().data_ptr() for h in host if torch.is_tensor(h)}) == 1
    # Nothing to copy: the CPU engine's tensors are host memory already; lists; a mixed batch (never made).
    assert scheduler_patch.host_copy_token_ids_logprobs(vals) is None
    assert scheduler_patch.host_copy_token_ids_logprobs([[], []], cpu_too=True) is None
    assert scheduler_patch.host_copy_token_ids_logprobs(None) is None
    mixed = [vals[0], vals[2].double()]
    assert scheduler_patch.host_copy_token_ids_logprobs(mixed, cpu_too=True) is None


@pytest.mark.sglang
def test_copy_to_cpu_starts_the_readback_and_never_fails(monkeypatch):
    """The installed `GenerationBatchResult.copy_to_cpu` replaces the multi-item logprobs with their host
    copy and then runs sglang's own (which records `copy_done`); an error in the copy leaves sglang's own
    readback in place instead of ending the scheduler."""
    pytest.importorskip("sglang.srt")
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers import utils

    cls = utils.GenerationBatchResult
    stock = unwrapped(cls)
    monkeypatch.setattr(cls, "copy_to_cpu", stock)  # restored after the test
    assert scheduler_patch.apply_readback() is True
    wrapped = cls.copy_to_cpu
    assert wrapped is not stock and scheduler_patch.apply_readback() is True
    assert cls.copy_to_cpu is wrapped  # installed once, not wrapped twice

    def result(vals, idxs):
        out = LogitsProcessorOutput(
            next_token_logits=None,
            input_token_logprobs=torch.zeros(sum(ITEMS)),
            input_token_ids_logprobs_val=vals,
            input_token_ids_logprobs_idx=idxs,
        )
        return cls(
            logits_output=out, next_token_ids=torch.zeros(5, dtype=torch.long), copy_done=torch.cpu.Event()
        )

    vals, idxs = mis_outputs(torch.float32)
    want = read_back(vals, idxs)
    r = result(list(vals), idxs)
    r.copy_to_cpu(True)  # CPU tensors: nothing to wait for, left as they are
    assert all(a is b for a, b in zip(r.logits_output.input_token_ids_logprobs_val, vals, strict=True))

    real = scheduler_patch.host_copy_token_ids_logprobs
    # the wrapper calls the copy of the module that defines it (scheduler_patches/readback.py)
    monkeypatch.setattr(readback, "host_copy_token_ids_logprobs", functools.partial(real, cpu_too=True))
    r = result(list(vals), idxs)
    r.copy_to_cpu(return_logprob=True, return_hidden_states=False)
    got = r.logits_output.input_token_ids_logprobs_val
    assert got[0].data_ptr() != vals[0].data_ptr() and read_back(got, idxs) == want
    assert r.next_token_ids.tolist() == [0] * 5  # sglang's own copy ran after ours

    def broken(v):
        raise RuntimeError("no pinned memory")

    monkeypatch.setattr(readback, "host_copy_token_ids_logprobs", broken)
    r = result(list(vals), idxs)
    r.copy_to_cpu(True)
    assert read_back(r.logits_output.input_token_ids_logprobs_val, idxs) == want


@pytest.mark.sglang
def test_patches_decline_where_sglang_differs_and_are_chosen_per_engine(monkeypatch):
    pytest.importorskip("sglang.srt")
    import sys

    from sglang.srt.managers import utils

    monkeypatch.setattr(utils.GenerationBatchResult, "copy_to_cpu", unwrapped(utils.GenerationBatchResult))
    monkeypatch.delattr(utils.GenerationBatchResult, "copy_to_cpu")
    assert scheduler_patch.apply_readback() is False
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.utils", None)
    assert scheduler_patch.apply_readback() is False
    monkeypatch.undo()

    # Which patches a scheduler installs: the default entry point installs all; a subset only its own.
    from sglang.srt.layers import logprob_processor as lp
    from sglang.srt.managers import scheduler

    monkeypatch.setattr(utils.GenerationBatchResult, "copy_to_cpu", unwrapped(utils.GenerationBatchResult))
    monkeypatch.setattr(
        lp, "get_token_ids_logprobs_batch_optimized", lp.get_token_ids_logprobs_batch_optimized
    )
    monkeypatch.setattr(scheduler, "run_scheduler_process", lambda *a, **k: (a, k))
    stock_gather = lp.get_token_ids_logprobs_batch_optimized
    assert scheduler_patch.run_scheduler_process_with(("gather",), 1, x=2) == ((1,), {"x": 2})
    assert lp.get_token_ids_logprobs_batch_optimized is scheduler_patch.token_ids_logprobs_no_sync
    assert not getattr(utils.GenerationBatchResult.copy_to_cpu, "_openjev_readback", False)
    lp.get_token_ids_logprobs_batch_optimized = stock_gather
    assert scheduler_patch.install(("readback",)) == {"readback": True}
    assert lp.get_token_ids_logprobs_batch_optimized is stock_gather
    assert utils.GenerationBatchResult.copy_to_cpu._openjev_readback

    # The engine class hands its choice to the spawned schedulers by reference (pickled).
    assert (
        scheduler_patch.engine_class("all").run_scheduler_process_func
        is scheduler_patch.run_scheduler_process
    )
    none = scheduler_patch.engine_class("none").run_scheduler_process_func
    assert none.func is scheduler_patch.run_scheduler_process_with and none.args == ((),)
    assert pickle.loads(pickle.dumps(none)).args == ((),)


def test_sglang_patches_option_is_validated():
    """--sglang-patches takes exactly scheduler_patch.PATCH_SETS' names; hf, which has no scheduler, refuses
    anything but the default."""
    from openjev_batch.config import build_config
    from openjev_batch.errors import ConfigError
    from openjev_batch.options import ENGINE_OPTIONS

    (opt,) = [o for o in ENGINE_OPTIONS if o.name == "sglang_patches"]
    assert set(re.fullmatch(r"\^\((.*)\)\$", opt.constraints["pattern"]).group(1).split("|")) == set(
        scheduler_patch.PATCH_SETS
    )
    base = dict(input="in.jsonl", output="o.parquet", model="m")
    assert build_config(**base, backend="sglang", sglang_patches="readback").sglang_patches == "readback"
    assert build_config(**base, backend="sglang").sglang_patches == "all"
    with pytest.raises(ConfigError, match="sglang_patches"):
        build_config(**base, backend="sglang", sglang_patches="fast")
    with pytest.raises(ConfigError, match=r"hf backend does not read --sglang-patches \(sglang only\)"):
        build_config(**base, backend="hf", sglang_patches="none")


def test_idle_tree_check_runs_at_most_once_per_interval(monkeypatch):
    """The idle radix-tree sanity check (20 % of the scheduler's samples on the H200 W3 run) is wrapped on
    sglang's real SchedulerInvariantChecker: the check itself still runs, once per interval, with its
    arguments; and the patch is in the product's default set."""
    pytest.importorskip("sglang.srt")
    from sglang.srt.managers.scheduler_components import invariant_checker as ic

    calls = []
    monkeypatch.setattr(ic.SchedulerInvariantChecker, "_check_tree_cache", lambda self: calls.append(self))
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    assert scheduler_patch.apply_idle_check(interval_s=30.0)
    assert scheduler_patch.apply_idle_check(interval_s=30.0)  # idempotent: wrapped once
    checker = object.__new__(ic.SchedulerInvariantChecker)
    for t in (1000.0, 1010.0, 1029.9, 1030.0, 1031.0, 1100.0):
        clock[0] = t
        checker._check_tree_cache()
    assert calls == [checker, checker, checker]  # at 1000, 1030 and 1100
    assert "idle-check" in scheduler_patch.PATCH_SETS["all"]
    assert "idle-check" not in scheduler_patch.PATCH_SETS["gather"]
