"""`eval`: a benchmark file → a scored report (evaluation/)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError
from ..interrupts import stop_on_signals
from . import EXIT_FAILED, EXIT_ROW_ERRORS, _fail, _stopped, app, err, out, printable
from .display import _print_plan, _progress
from .options import (
    CHUNK_ROWS_HELP,
    DRY_RUN,
    ENGINE,
    GPUS_PER_WORKER,
    LIMIT,
    RAY,
    RAY_ADDRESS,
    SYSTEM_PROMPT,
    THREADS,
    WORKERS,
    _engine_options,
    _quiet,
    _resolve,
    _text_or_file,
    apply_threads_option,
    ray_options,
)


# Length (over ~60 lines): mostly its typer options (the docstring is the command's --help).
@app.command("eval")
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
    backend: str = typer.Option(
        None, "--backend", "-b", help="hf | sglang (default: sglang where installed and a GPU is present)."
    ),
    fmt: str = typer.Option(
        "auto",
        "--format",
        help="auto | mmlu-pro | mmlu | boolq | noul | nli | text-classification (a classifier head).",
    ),
    shots: int = typer.Option(0, help="Worked examples of the same category from --dev (0: zero-shot)."),
    dev: Path = typer.Option(None, help="Dev/validation split (same format) for --shots."),
    sample: int = typer.Option(None, help="Score a reproducible subset of N questions (see --seed)."),
    limit: int = LIMIT,
    system_prompt: str = SYSTEM_PROMPT,
    show_prompt: int = typer.Option(
        None,
        "--show-prompt",
        min=1,
        help="Print what the model gets for the first N questions and exit; tokenizer only, no -o.",
    ),
    dry_run: bool = DRY_RUN,
    seed: int = typer.Option(42, help="Seed of --sample and of the --calibrate split."),
    calibrate: float = typer.Option(None, help="Fit one temperature on this share, report the rest scaled."),
    engine: dict = ENGINE,
    chunk_rows: int = typer.Option(2048, help=CHUNK_ROWS_HELP),
    threads: int = THREADS,
    max_branches: int = typer.Option(4096, help="Most branches per window."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output folder."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the unfinished job in the output folder (or re-score a finished one).",
    ),
    ray: bool = RAY,
    ray_address: str = RAY_ADDRESS,
    workers: int = WORKERS,
    gpus_per_worker: float = GPUS_PER_WORKER,
) -> None:
    """Turn a benchmark file into a scored report: accuracy with 95 % intervals, Brier, ECE, reliability PNG."""
    apply_threads_option(threads)  # before torch is imported (the backends)
    from ..backends import default_backend
    from ..evaluation import build_eval_config, run_eval
    from ..evaluation.report import rich_tables

    if output_dir is None and not show_prompt and not dry_run:
        raise typer.BadParameter(
            "missing: -o/--output-dir (only --show-prompt and --dry-run run without it)", param_hint="'-o'"
        )
    _quiet(progress)
    stop_on_signals()  # SIGTERM (schedulers) ends the eval like Ctrl-C: message, partial kept, exit 143
    try:
        if system_prompt is not None:
            system_prompt = _text_or_file(system_prompt, "--system-prompt")
        cfg = build_eval_config(
            input=input, output_dir=output_dir or Path("."), model=_resolve(model, tokenizer_only=bool(show_prompt) or dry_run), model_name=model,
            limit=limit, system_prompt=system_prompt,
            backend=backend or default_backend(), format=fmt, shots=shots, dev=dev, sample=sample, seed=seed,
            calibrate=calibrate, chunk_rows=chunk_rows, max_branches_per_window=max_branches, progress=progress,
            force=force,
            resume=resume, **engine,
        )  # fmt: skip
        on_ray = ray_options(ray, ray_address, workers, gpus_per_worker)  # refuses them without --ray
        if dry_run or show_prompt:
            _plan_only(cfg, show_prompt, dry_run=dry_run, resume=resume, force=force, ray=ray)
            return
        with _progress("prefill", "questions", progress) as live:
            rep = run_eval(cfg, progress=live, ray=on_ray)
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # an output folder that cannot be made (under a file, on /proc) or that filled up
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: finished chunks stay for `eval --resume`
        _stopped(e, output_dir / "predictions.parquet.partial")
    for t in rich_tables(rep):
        out.print(t)
    out.print(
        f"reports: {output_dir}/report.md, report.json, reliability.png, predictions.parquet", highlight=False
    )
    if rep["errors"]:
        err.print(f"[yellow]{rep['errors']} question(s) have errors[/]: see {output_dir}/predictions.parquet")
        raise typer.Exit(EXIT_ROW_ERRORS)


def _plan_only(cfg, show_prompt: int | None, *, dry_run: bool, resume: bool, force: bool, ray: bool) -> None:
    """--dry-run (the plan of the whole benchmark) or --show-prompt (the first questions' prompts): the
    tokenizer alone; the output folder is neither read nor written."""
    if dry_run:
        from ..evaluation.run import dry_run as plan_only

        if show_prompt or resume or ray:
            raise ConfigError(
                "--dry-run plans the whole benchmark and writes nothing: drop --show-prompt/--resume/--ray"
            )
        _print_plan(plan_only(cfg), "eval")
        return
    from ..evaluation.run import show_prompt as render

    if resume or force or ray:
        raise ConfigError("--show-prompt prints the first questions and exits: drop --resume/--force/--ray")
    # as it is (no markup or wrapping), but no raw control characters: a benchmark's ESC codes
    sys.stdout.write(printable(render(cfg, show_prompt)))
