"""Evaluation, a task layer over `run`: benchmark formats (tasks.py: one declaration each) → the product's
input (build.py) → `pipeline.run_job` → metrics (metrics.py) → reports (report.py); run.py holds the typed
`EvalConfig` and `run_eval`."""

from __future__ import annotations

from .run import EvalConfig, build_eval_config, rescore, run_eval

__all__ = ["EvalConfig", "build_eval_config", "rescore", "run_eval"]
