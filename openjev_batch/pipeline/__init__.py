"""The pipeline: read (input/: read.py, source.py) → prompt + plan (plan.py) → prefill → read out
(stages.py, run by runners/) → write (output/: sink.py, store.py's OutputStore), all driven by the one job
loop (loop.py; job.py's `run_job` is it over a file; dry_run.py's `dry_run` and `show_prompt` are it with the
plan-only runner); runners/ray/ the Ray runner.
`from openjev_batch.pipeline import run_job` and the other public names of `__all__` resolve lazily to
job.py; a submodule (`from openjev_batch.pipeline import loop`) is imported as any module is."""

from __future__ import annotations

import importlib

__all__ = ["choose_request_pattern", "run_job", "run_job_ray"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(f"{__name__}.job"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
