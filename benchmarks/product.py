"""The product, as a user drives it: `openjev_batch.Classifier` held open, one `run` per job.

A measured job is read JSONL → `Classifier.run` (render, tokenize, plan, prefill, read out) → write Parquet,
engine start excluded (reported apart). Options are the documented ones, given as `Classifier` keywords
(`request_pattern="first-branch"` is `--request-pattern first-branch`, `groups_per_window`,
`pipeline_depth`, `sglang_patches`, `skip_prefix_warmup`, `engine_args` = `--engine-arg`). A variant is
its own Classifier: the product starts each engine with an empty radix cache (after its kernel warm-up),
so no job reads another's prefixes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from common import log

import openjev_batch as ob

# What the lent H200's kit needs on top of the product's own engine defaults: sglang's pytorch sampling backend
# (the kit lacks flashinfer's sampler). The attention backend is left to the product (issue 30: the kit's
# `triton` used to turn multi-item scoring off, so the benchmarks never measured the default); where the product
# runs no multi-item scoring sglang would pick FA3 on Hopper, which the kit lacks: `KIT_ATTENTION` then.
GPU_KIT = {"engine_args": {"sampling_backend": "pytorch"}}
KIT_ATTENTION = "flashinfer"
CPU_SMOKE = {"device": "cpu", "dtype": "float32"}


def engine_options(smoke: bool, **options) -> dict:
    """The Classifier keywords of one engine: the kit's (or the CPU smoke's) plus `options`; an
    `engine_args` given here is merged over the kit's."""
    base = dict(CPU_SMOKE if smoke else GPU_KIT)
    if not smoke and options.get("request_pattern") in ("first-branch", "prefix-first"):
        base["attention_backend"] = KIT_ATTENTION  # no multi-item scoring: sglang's Hopper default (FA3) is absent
    extra = options.pop("engine_args", {}) or {}
    base["engine_args"] = {**base.get("engine_args", {}), **extra}
    if smoke:
        base["engine_args"].pop("load_format", None)
    return {**base, **options}


def open_classifier(model: Path | str, backend: str = "sglang", **options) -> tuple[ob.Classifier, float]:
    """A started Classifier and its start-up seconds (engine start + the product's kernel warm-up)."""
    t = time.perf_counter()
    clf = ob.Classifier(str(model), backend, **options)
    return clf, round(time.perf_counter() - t, 1)


def read_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_job(
    clf: ob.Classifier, path: Path, questions: Path | None, out: Path | None = None, progress: list | None = None
) -> dict:
    """One job end to end on a started Classifier: read the JSONL rows, answer them, write Parquet.
    Returns the wall seconds and the run's counts (`Classifier.last_summary`). `progress` (if given) collects
    (branches done, seconds) at each progress report, so a job cut short still tells its rate."""
    import pyarrow.parquet as pq

    t = time.perf_counter()
    done = [0]

    def tick(branches: int, tokens: int) -> None:
        done[0] += branches
        if progress is not None:
            progress.append((done[0], round(time.perf_counter() - t, 2)))
        log(f"  {done[0]} branches, {time.perf_counter() - t:.1f} s")

    table = clf.run(read_rows(path), str(questions) if questions else None, output="arrow", on_progress=tick)
    if out is not None:
        pq.write_table(table, out)
    wall = time.perf_counter() - t
    s = clf.last_summary
    return {
        "s": round(wall, 3),
        "rows": s.rows,
        "questions": s.questions,
        "errors": s.errors,
        "logical_tokens": s.logical_tokens,
        "unique_tokens": s.unique_tokens,
        "computed_tokens": s.computed_tokens,
        "cache_hit_rate": round(s.cache_hit_rate, 4),
        "pattern": s.pattern,
    }
