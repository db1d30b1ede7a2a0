"""`eval`: a benchmark file → a scored report (evaluation/)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError, os_error_text
from ..interrupts import stop_on_signals
from .app import EXIT_FAILED, EXIT_ROW_ERRORS, _fail, _stopped, err, out, printable
from .display import _print_plan, _progress
from .door import ENGINE, JOB, READOUT, Door, command, own
from .options import BACKEND, _quiet, _resolve, apply_threads_option, ray_options, show_prompt_option


@dataclass(frozen=True)
class EvalOwn:
    """eval's own options; its readout options (the system prompt, --debias-order), the engine and job options
    are generated (cli/door.py)."""

    input: Path = own(typer.Argument(..., help="Benchmark .parquet/.jsonl: MMLU-Pro, MMLU, BoolQ, or noul input + label."))
    output_dir: Path | None = own(typer.Option(
        None, "-o", "--output-dir", help="Folder for the predictions and reports (not with --show-prompt or --dry-run).",
    ))  # fmt: skip
    model: str = own(typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name."))
    backend: str | None = own(BACKEND)
    fmt: str = own(typer.Option(
        "auto", "--format", help="auto | mmlu-pro | mmlu | boolq | noul | nli | text-classification (a classifier head).",
    ))  # fmt: skip
    shots: int = own(typer.Option(0, help="Worked examples of the same category from --dev (0: zero-shot)."))
    dev: Path | None = own(typer.Option(None, help="Dev/validation split (same format) for --shots."))
    sample: int | None = own(typer.Option(None, help="Score a reproducible subset of N questions (see --seed)."))
    show_prompt: int | None = own(show_prompt_option("questions"))
    seed: int = own(typer.Option(42, help="Seed of --sample and of the --calibrate split."))
    calibrate: float | None = own(typer.Option(
        None, help="Fit one temperature on this share (between 0 and 1, exclusive), report the rest scaled."
    ))  # fmt: skip
    force: bool = own(typer.Option(False, "--force", help="Overwrite a non-empty output folder."))


LAYOUT = ("input", "output_dir", "model", "backend", "fmt", "shots", "dev", "sample", READOUT, "show_prompt", "seed",
          "calibrate", ENGINE, "force", JOB)  # fmt: skip


@command("eval", EvalOwn, LAYOUT, short_help="Score a benchmark file into a report (accuracy, calibration).")
def eval_(door: Door[EvalOwn]) -> None:
    """Turn a benchmark file into a scored report: accuracy with 95 % intervals, Brier, ECE, reliability PNG."""
    args, job = door.own, door.job
    apply_threads_option(job.threads)  # before torch is imported (the backends)
    from ..evaluation import run_eval  # lazy: keeps --help fast

    dry_run, progress, show_prompt, output_dir = job.dry_run, job.progress, args.show_prompt, args.output_dir
    if output_dir is None and not show_prompt and not dry_run:
        raise typer.BadParameter(
            "missing: -o/--output-dir (only --show-prompt and --dry-run run without it)", param_hint="'-o'"
        )
    _quiet(progress)
    stop_on_signals()  # SIGTERM (schedulers) ends the eval like Ctrl-C: message, partial kept, exit 143
    try:
        cfg, on_ray = _config(door, tokenizer_only=bool(show_prompt) or dry_run)
        if dry_run or show_prompt:
            _plan_only(cfg, show_prompt or 0, dry_run=dry_run, resume=job.resume, force=args.force, ray=job.ray)
            return
        with _progress("prefill", "questions", progress) as live:
            rep = run_eval(cfg, progress=live, ray=on_ray)
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # an output folder that cannot be made (under a file, on /proc) or that filled up
        err.print(f"error: {printable(os_error_text(e))}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: finished chunks stay for `eval --resume`
        _stopped(e, Path(output_dir or ".") / "predictions.parquet.partial")
    _print_report(rep, Path(output_dir or "."))


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


def _config(door: Door[EvalOwn], tokenizer_only: bool):
    """The EvalConfig from eval's door (the model name resolved, the default backend) and --ray's RayOptions
    (None without --ray). Raises ConfigError (build_eval_config's refusals too, and the --ray options without
    --ray)."""
    from ..backends import default_backend  # lazy: keeps --help fast
    from ..evaluation import build_eval_config  # lazy: keeps --help fast

    args, job = door.own, door.job
    cfg = build_eval_config(
        input=args.input, output_dir=args.output_dir or Path("."), format=args.fmt, shots=args.shots, dev=args.dev,
        sample=args.sample, seed=args.seed, calibrate=args.calibrate, force=args.force,
        model=_resolve(args.model, tokenizer_only=tokenizer_only), model_name=args.model,
        backend=args.backend or default_backend(), **door.readout.given, **job.config(), **door.engine.given,
    )  # fmt: skip
    return cfg, ray_options(job.ray, job.ray_address, job.workers, job.gpus_per_worker)


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
