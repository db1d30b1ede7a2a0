"""How a command gets its options: the engine options (`_engine_options`) and the options of every command that
runs a job (run, classify, eval), declared once: a command's `job`
parameter stands for them all and receives them as one dict (`_job_options`, applied by `_engine_options`)."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path

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
    parse_engine_args,
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


ENGINE: dict = {}  # where a command's engine options go (`_engine_options`); never a CLI option itself


def _engine_options(command: str):
    """Put the engine options options.ENGINE_OPTIONS declares for `command` where the command's `engine`
    parameter stands, each as its CLI option; the command receives them as one dict `engine` of config
    fields (`--engine-arg key=value` pairs parsed). A `job` parameter likewise becomes the job options
    (`_job_options`). Also `--config FILE` (cli/jobfile.py): every command that runs a job takes its options
    from a file."""
    from ..options import ENGINE_OPTIONS

    declared = [o for o in ENGINE_OPTIONS if command in o.commands]

    def option(o) -> inspect.Parameter:
        if isinstance(o.default, dict):  # key=value pairs, repeatable
            annotation, default = list[str], None
        else:
            annotation = next((t for t in typing.get_args(o.type) if t is not type(None)), o.type)
            default = o.default
        info = typer.Option(default, o.cli_flag, help=o.help)
        return inspect.Parameter(
            o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=annotation
        )

    from .jobfile import load_job_file

    config = inspect.Parameter(
        "config", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
        default=typer.Option(
            None, "--config", is_eager=True, callback=load_job_file, dir_okay=False,
            help="A JSON/YAML file of this command's options (`chunk-rows: 512`, `input`, `model` too); "
            "flags given here override it.",
        ),
    )  # fmt: skip

    def deco(f):
        if "job" in inspect.signature(f).parameters:
            f = _job_options(command)(f)

        @functools.wraps(f)
        def wrapper(**kw):
            kw.pop("config", None)  # applied as the command's defaults when it was parsed
            engine = {o.name: kw.pop(o.name) for o in declared}
            if "engine_args" in engine:
                from ..errors import ConfigError

                try:
                    engine["engine_args"] = parse_engine_args(engine["engine_args"] or [])
                except ConfigError as e:  # parsed before the command's own error handling: same exit 4
                    from .app import _fail

                    _fail(e)
            return f(**kw, engine=engine)

        return _expand(f, wrapper, "engine", [option(o) for o in declared], [config])

    return deco


def _expand(f, wrapper, name: str, params: list[inspect.Parameter], extra=()):
    """`wrapper` (of `f`) with the signature typer reads: `f`'s parameter `name` replaced by `params`, and
    `extra` at the end."""
    sig = inspect.signature(f, eval_str=True)
    out = []
    for p in sig.parameters.values():
        out.extend(params if p.name == name else [p])
    out.extend(extra)
    wrapper.__signature__ = sig.replace(parameters=out)
    wrapper.__annotations__ = {p.name: p.annotation for p in out}
    return wrapper
