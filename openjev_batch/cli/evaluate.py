"""`eval`: a benchmark file → a scored report (evaluation/)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError, os_error_text
from ..interrupts import stop_on_signals
from ..job_options import JobOptions
from .app import EXIT_FAILED, EXIT_ROW_ERRORS, _fail, _stopped, app, err, out, printable
from .display import _print_plan, _progress
from .job_options import ENGINE, JOB, READOUT, _engine_options
from .options import (
    BACKEND,
    _quiet,
    _resolve,
    _text_or_file,
    apply_threads_option,
    ray_options,
    show_prompt_option,
)


@app.command("eval", short_help="Score a benchmark file into a report (accuracy, calibration).")
@_engine_options("eval")
def eval_(
    input: Path = typer.Argument(
        ..., help="Benchmark .parquet/.jsonl: MMLU-Pro, MMLU, BoolQ, or noul input + label."
    ),
    output_dir: Path = typer.Option(
        None,
        "-o",
        "--output-dir",
        help="Folder for the predictions and reports (not with --show-prompt or --dry-run).",
    ),
    model: str = typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name."),
    backend: str = BACKEND,
    fmt: str = typer.Option(
        "auto",
        "--format",
        help="auto | mmlu-pro | mmlu | boolq | noul | nli | text-classification (a classifier head).",
    ),
    shots: int = typer.Option(0, help="Worked examples of the same category from --dev (0: zero-shot)."),
    dev: Path = typer.Option(None, help="Dev/validation split (same format) for --shots."),
    sample: int = typer.Option(None, help="Score a reproducible subset of N questions (see --seed)."),
    readout_opts: dict = READOUT,
    show_prompt: int = show_prompt_option("questions"),
    seed: int = typer.Option(42, help="Seed of --sample and of the --calibrate split."),
    calibrate: float = typer.Option(
        None, help="Fit one temperature on this share (between 0 and 1, exclusive), report the rest scaled."
    ),
    engine: dict = ENGINE,
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output folder."),
    job: dict = JOB,
) -> None:
    """Turn a benchmark file into a scored report: accuracy with 95 % intervals, Brier, ECE, reliability PNG."""
    apply_threads_option(job["threads"])  # before torch is imported (the backends)
    from ..evaluation import run_eval  # lazy: keeps --help fast

    dry_run, progress = job["dry_run"], job["progress"]
    if output_dir is None and not show_prompt and not dry_run:
        raise typer.BadParameter(
            "missing: -o/--output-dir (only --show-prompt and --dry-run run without it)", param_hint="'-o'"
        )
    _quiet(progress)
    stop_on_signals()  # SIGTERM (schedulers) ends the eval like Ctrl-C: message, partial kept, exit 143
    try:
        cfg, on_ray = _config(job, engine, input=input, output_dir=output_dir or Path("."), model=model,
                      tokenizer_only=bool(show_prompt) or dry_run, backend=backend, format=fmt, shots=shots,
                      dev=dev, sample=sample, seed=seed, calibrate=calibrate, force=force, **readout_opts)  # fmt: skip
        if dry_run or show_prompt:
            _plan_only(cfg, show_prompt, dry_run=dry_run, resume=job["resume"], force=force, ray=job["ray"])
            return
        with _progress("prefill", "questions", progress) as live:
            rep = run_eval(cfg, progress=live, ray=on_ray)
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # an output folder that cannot be made (under a file, on /proc) or that filled up
        err.print(f"error: {printable(os_error_text(e))}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: finished chunks stay for `eval --resume`
        _stopped(e, output_dir / "predictions.parquet.partial")
    _print_report(rep, output_dir)


def _print_report(rep: dict, output_dir: Path) -> None:
    """The report's tables and where its files are; exit 3 when some questions have errors."""
    from ..evaluation.report import rich_tables  # lazy: keeps --help fast

    for t in rich_tables(rep):
        out.print(t)
    out.print(
        f"reports: {output_dir}/report.md, report.json, reliability.png, predictions.parquet", highlight=False
    )
    if rep["errors"]:
        err.print(f"[yellow]{rep['errors']} question(s) have errors[/]: see {output_dir}/predictions.parquet")
        raise typer.Exit(EXIT_ROW_ERRORS)


def _config(job: dict, engine: dict, *, model: str, tokenizer_only: bool, backend, system_prompt=None, **kw):
    """The EvalConfig from eval's options (the model name resolved, --system-prompt's @FILE read, the
    default backend) and --ray's RayOptions (None without --ray). Raises ConfigError (build_eval_config's
    refusals too, and the --ray options without --ray)."""
    from ..backends import default_backend  # lazy: keeps --help fast
    from ..evaluation import build_eval_config  # lazy: keeps --help fast

    if system_prompt is not None:
        system_prompt = _text_or_file(system_prompt, "--system-prompt")
    own = {k: v for k, v in job.items() if k in JobOptions.model_fields}  # the config's job options
    cfg = build_eval_config(
        **kw, model=_resolve(model, tokenizer_only=tokenizer_only), model_name=model, **own,
        system_prompt=system_prompt, backend=backend or default_backend(), **engine,
    )  # fmt: skip
    return cfg, ray_options(job["ray"], job["ray_address"], job["workers"], job["gpus_per_worker"])


def _plan_only(cfg, show_prompt: int, *, dry_run: bool, resume: bool, force: bool, ray: bool) -> None:
    """--dry-run (the plan of the whole benchmark) or --show-prompt (the first questions' prompts): the
    tokenizer alone; the output folder is neither read nor written."""
    from ..evaluation.run import dry_run as plan_only  # lazy: keeps --help fast
    from ..evaluation.run import show_prompt as render  # lazy: keeps --help fast

    if dry_run:
        if show_prompt or resume or ray:
            raise ConfigError(
                "--dry-run plans the whole benchmark and writes nothing: drop --show-prompt/--resume/--ray"
            )
        _print_plan(plan_only(cfg), "eval")
        return
    if resume or force or ray:
        raise ConfigError("--show-prompt prints the first questions and exits: drop --resume/--force/--ray")
    # as it is (no markup or wrapping), but no raw control characters: a benchmark's ESC codes
    sys.stdout.write(printable(render(cfg, show_prompt)))
