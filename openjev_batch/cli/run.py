"""`run` and `classify`: one body (`_run_job`), the readout is the difference; a new readout's command is
`@command(name, JobOwn, JOB_LAYOUT)` over `_run_job` (its options generated: cli/door.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..errors import ConfigError, OpenjevError, OutputFinished, os_error_text
from ..interrupts import stop_on_signals
from ..options import BACKENDS
from ..readouts import build
from .app import EXIT_FAILED, EXIT_ROW_ERRORS, _fail, _stopped, err, printable
from .display import _print_plan, _print_summary, _progress
from .door import ENGINE, JOB, READOUT, Door, command, own
from .job_options import _readout_of, job_flag
from .options import (
    BACKEND,
    STDIN_NAMES,
    _quiet,
    _resolve,
    _spool_stdin,
    apply_threads_option,
    ray_options,
    read_once,
    show_prompt_option,
)


@dataclass(frozen=True)
class JobOwn:
    """The own options of a command that runs a readout's job (`run`; a new readout's command as it is): its
    readout's options, the engine and job options are generated (cli/door.py, `JOB_LAYOUT`)."""

    input: Path = own(typer.Argument(
        ..., help="Input, one row per conversation: .parquet, .jsonl (.gz/.zst), .csv, .json, a datasets folder, "
        "or - (stdin).",
    ))  # fmt: skip
    output: Path | None = own(typer.Option(
        None, "-o", "--output",
        help="Output .parquet, .jsonl, .jsonl.gz, .json, .csv or .tsv (by extension; written atomically), or - "
        "(JSONL on stdout).",
    ))  # fmt: skip
    model: str = own(typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name (`models list`)."))
    backend: str | None = own(BACKEND)
    keep: str = own(job_flag("keep", "run"))


@dataclass(frozen=True)
class RunOwn(JobOwn):
    show_prompt: int | None = own(show_prompt_option("rows (prefix, suffixes, label tokens)"))


# where the generated options stand among a job command's own (their order in --help)
JOB_LAYOUT = ("input", "output", "model", "backend", READOUT, "keep", ENGINE, JOB)


@command("run", RunOwn, (*JOB_LAYOUT, "show_prompt"), short_help="Answer every question of every row from label logprobs.")
def run(door: Door[RunOwn]) -> None:
    """Answer every question of every row from the model's next-token label logprobs."""
    _run_job(door)


def _run_job(door: Door[Any]) -> None:
    """The one body of `run`, `classify` and a new readout's command (`door.own` a JobOwn): build the config,
    then the dry run, the prompt display, the Ray run or the local job; print the summary; exit 3 when some
    rows or questions have errors."""
    args, job, name = door.own, door.job, door.command
    show_prompt = getattr(args, "show_prompt", None)  # run's (RunOwn)
    output, resume, dry_run, ray = args.output, job.resume, job.dry_run, job.ray
    if output is None and not dry_run and not show_prompt:
        also = " and --show-prompt" if name == "run" else ""
        raise typer.BadParameter(
            f"missing: -o/--output (only --dry-run{also} run without it)", param_hint="'-o'"
        )
    try:
        _check_names_early(args)
    except OpenjevError as e:
        _fail(e)
    if dry_run:  # its table comes at the end; torch, the tokenizer and the whole input come first (issue 48.12:
        # 51-157 s at load, with nothing said)
        err.print(f"--dry-run: planning every row of {printable(str(args.input))} with the model's tokenizer alone "
                  "(no weights load, nothing is written); torch and the tokenizer load first", markup=False)  # fmt: skip
    threads_note = apply_threads_option(job.threads)  # imports torch: seconds
    _quiet(job.progress)
    stack = contextlib.ExitStack()
    stop_on_signals()  # SIGTERM (schedulers) ends the job like Ctrl-C: message, partial kept, exit 143
    try:
        to_stdout = str(output) == "-"
        cfg = _config(door, stack, tokenizer_only=dry_run or bool(show_prompt))
        output = cfg.output
        # refuses the --ray options without --ray
        ray_opts = ray_options(ray, job.ray_address, job.workers, job.gpus_per_worker)
        if show_prompt or dry_run:
            _plan_only(cfg, name, show_prompt, dry_run=dry_run, resume=resume, ray=ray)
            return
        readout, s = _execute(cfg, name, ray_opts)
        if to_stdout:  # the summary and progress are on stderr: stdout holds the rows alone
            with open(output, "rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer)
            sys.stdout.flush()
            # the summary names where the rows went, not the temporary file they were joined in (removed below)
            s = dataclasses.replace(s, output="standard output (-o -)")
    except OutputFinished as e:  # --resume of an output this job finished: nothing to do, exit 0
        err.print(str(e), markup=False)
        return
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # the output folder vanished or filled up mid-job
        err.print(f"error: {printable(os_error_text(e))}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (interrupts.py): the window in flight is dropped
        _stopped(e, f"{output}.partial")
    finally:
        stack.close()
    _print_summary(name, readout, s, threads_note)
    # what moved since the baseline (run's and classify's option: a new readout's command may not declare it)
    if (baseline := getattr(job, "baseline", None)) is not None and Path(s.output).is_file():
        from .compare import print_baseline  # lazy: at the top it would list compare first in `-h`

        print_baseline(baseline, Path(s.output))
    if s.errors:
        raise typer.Exit(EXIT_ROW_ERRORS)


def _config(door: Door[Any], stack: contextlib.ExitStack, tokenizer_only: bool):
    """The job's RunConfig from the command's door: `-o -` and `-` (stdin) as temporary files that `stack`
    removes, --keep all resolved, the model name resolved; its readout is the command's."""
    from ..backends import default_backend  # lazy: keeps --help fast
    from ..config import build_config, check_not_input  # lazy: keeps --help fast
    from ..pipeline.input.read import all_columns  # lazy: keeps --help fast

    args, resume = door.own, door.job.resume
    input, output = args.input, args.output
    if str(output) == "-":  # JSONL on standard output, joined in a temporary folder first (atomic)
        import tempfile

        if resume:
            raise ConfigError("--resume needs an output file: standard output cannot be continued")
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="openjev-stdout-")))
        output = tmp / "stdout.jsonl"
    if read_once(input):
        if resume:
            what = "standard input" if str(input) in STDIN_NAMES else f"{input} is a pipe: it"
            raise ConfigError(f"--resume needs an input file: {what} cannot be read again")
        input = _spool_stdin(stack, input)
    keep = tuple(k.strip() for k in args.keep.split(",") if k.strip())
    model = _resolve(args.model, tokenizer_only=tokenizer_only)
    readout = _readout_of(door.command).name

    def config(keep: tuple[str, ...]):
        return build_config(
            input=input, output=output, model=model, backend=args.backend or default_backend(), readout=readout,
            keep=keep, **door.readout.given, **door.engine.given, **door.job.config(),
        )  # fmt: skip

    cfg = config(() if keep == ("all",) else keep)
    if keep == ("all",):  # every input column the readout neither reads nor writes, as the API's
        cfg = config(all_columns(cfg))
    if cfg.output is not None:  # the file the text came from is no part of the config, so checked here
        try:
            check_not_input(cfg.output, door.readout.files.get("system_prompt"), "the --system-prompt file")
        except ValueError as e:
            raise ConfigError(f"invalid options: {e}") from None
    return cfg


def _check_names_early(args: JobOwn) -> None:
    """The mistakes a name or a path shows, refused before torch is imported (--threads, the default
    backend: seconds) and the model resolved (a packaged one may be fetched): a missing input (as the job's
    own check words it), an output in no folder or of an unknown kind, an unknown backend (issue 34.5: 6-12 s
    for these). build_config and the job check them again, with every other option."""
    from ..config import check_output_path  # lazy: keeps --help fast
    from ..pipeline.input.read import check_exists  # lazy: keeps --help fast

    if str(args.input) not in STDIN_NAMES:
        check_exists(args.input)
    if args.output is not None and str(args.output) != "-":
        try:
            check_output_path(Path(args.output), any_format=True)
        except ValueError as e:
            raise ConfigError(f"invalid options: output: {e}") from None
    if args.backend is not None and args.backend not in BACKENDS:
        raise ConfigError(
            f"invalid options: backend: unknown backend {args.backend!r}; expected one of {', '.join(BACKENDS)}"
        )


def _plan_only(cfg, command: str, show_prompt: int | None, *, dry_run: bool, resume: bool, ray: bool) -> None:
    """--show-prompt (the first rows' prompts) or --dry-run (the plan): the tokenizer alone, nothing written."""
    from ..pipeline.dry_run import dry_run as plan_only  # lazy: keeps --help fast
    from ..pipeline.dry_run import show_prompt as render  # lazy: keeps --help fast

    if show_prompt:
        if dry_run or resume or ray:
            raise ConfigError("--show-prompt prints the first rows and exits: drop --dry-run/--resume/--ray")
        # as it is (no markup, emoji codes or wrapping), but no raw control characters: a row's ESC codes
        sys.stdout.write(printable(render(cfg, show_prompt)))
        return
    if resume:  # the plan covers the whole input; OUT.partial is neither read nor checked
        raise ConfigError("--dry-run plans the whole input and ignores OUT.partial: drop --resume")
    if ray:  # a plan here, in one process, is not what the Ray buckets would run: said, not ignored
        raise ConfigError(
            "--dry-run plans on this machine with the tokenizer only, not per Ray bucket: drop --ray"
        )
    _print_plan(plan_only(cfg), command)


def _execute(cfg, command: str, ray_opts):
    """The job, local or on Ray (`ray_opts`), under a progress bar in the readout's unit. Returns the readout
    and the Summary."""
    from ..pipeline.job import choose_request_pattern, run_job  # lazy: keeps --help fast

    # built once, for the choice before the engine starts and the job; classify reads its labels here
    # (config.json only): a checkpoint that is no classifier is refused before the progress bar starts
    readout = build(cfg.readout, cfg)
    cfg, why = choose_request_pattern(cfg, readout)  # the backend's choices before its engine starts
    if why:
        err.print(why, markup=False)
    with _progress("prefill" if command == "run" else command, f"{readout.noun}s", cfg.progress) as live:
        s = run_job(cfg, progress=live, ray=ray_opts, readout=readout)
    return readout, s


@dataclass(frozen=True)
class ClassifyOwn(JobOwn):
    input: Path = own(typer.Argument(..., help="Input .parquet/.jsonl: `text`, or `premise` + `hypothesis`, per row."))
    output: Path | None = own(typer.Option(
        None, "-o", "--output", help="Output .parquet (written atomically; not with --dry-run)."
    ))  # fmt: skip
    model: str = own(typer.Option(..., "--model", "-m", help="A *ForSequenceClassification checkpoint with id2label."))
    keep: str = own(job_flag("keep", "classify"))


@command("classify", ClassifyOwn, JOB_LAYOUT, short_help="Classify every row with a sequence-classification head.")
def classify(door: Door[ClassifyOwn]) -> None:
    """Classify every row with a sequence-classification head (e.g. NLI): logits, probs, label per row."""
    _run_job(door)
