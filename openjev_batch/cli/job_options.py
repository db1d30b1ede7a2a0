"""The options of every command that runs a job (run, classify, eval), declared once: a command's `job`
parameter stands for them all and receives them as one dict (`_job_options`, applied by `_engine_options`)."""

from __future__ import annotations

import functools
import inspect

import typer

from .options import (
    DRY_RUN,
    GPUS_PER_WORKER,
    LIMIT,
    PROGRESS,
    RAY,
    RAY_ADDRESS,
    RESUME,
    THREADS,
    WORKERS,
    _expand,
)

JOB: dict = {}  # where a command's job options go (`_job_options`); never a CLI option itself

# The options of every command that runs a job (run, classify, eval), in their --help order; typer's types
# (the others are flags).
JOB_OPTIONS = dict(
    progress=PROGRESS,
    resume=RESUME,
    dry_run=DRY_RUN,
    ray=RAY,
    ray_address=RAY_ADDRESS,
    workers=WORKERS,
    gpus_per_worker=GPUS_PER_WORKER,
    limit=LIMIT,
    threads=THREADS,
)
JOB_TYPES = {"ray_address": str, "workers": int, "gpus_per_worker": float, "limit": int, "threads": int}
# eval's --progress and --resume say what they do to an output folder
JOB_HELP = {
    "eval": dict(
        progress=typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        resume=typer.Option(
            False,
            "--resume",
            help="Continue the unfinished job in the output folder (or re-score a finished one).",
        ),
    )
}


def _job_options(command: str):
    """Put the job options every command that runs a job takes (JOB_OPTIONS, with `command`'s own help
    where it differs) where the command's `job` parameter stands; the command receives them as one dict
    `job`. Applied by `_engine_options`, inside it: its `--config` stays last."""
    table = {**JOB_OPTIONS, **JOB_HELP.get(command, {})}
    params = [
        inspect.Parameter(
            n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=JOB_TYPES.get(n, bool)
        )
        for n, info in table.items()
    ]

    def deco(f):
        @functools.wraps(f)
        def wrapper(**kw):
            job = {n: kw.pop(n) for n in table}
            return f(**kw, job=job)

        return _expand(f, wrapper, "job", params)

    return deco
