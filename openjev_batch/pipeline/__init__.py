"""The pipeline: read (read.py) → prompt + plan (plan.py) → prefill → read out (job.py: the stage
functions and the one job loop) → write (store.py's OutputStore); dry_run; ray/ the Ray runner.
`from openjev_batch.pipeline import run_job` and the other public names resolve lazily to job.py."""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    return getattr(importlib.import_module(f"{__name__}.job"), name)
