"""`validate`: check an input file's rows (either readout) without a model."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from ..errors import OpenjevError
from ..interrupts import stop_on_signals
from ..options import BACKENDS
from ..readouts import LABEL_LOGPROBS, NAMES, build, readout_class
from .app import EXIT_OK, EXIT_ROW_ERRORS, _fail, _stopped, err, out, printable
from .door import READOUT, Door, command, own
from .job_options import job_flag
from .options import _spool_stdin, read_once


@dataclass(frozen=True)
class ValidateOwn:
    """validate's own options; the readout options it takes (`-q`) are generated (cli/door.py)."""

    input: Path = own(typer.Argument(
        ..., help="Input: .parquet, .jsonl (.gz/.zst), .csv, .json, a datasets folder, or - (stdin)."
    ))  # fmt: skip
    readout: str = own(typer.Option(
        LABEL_LOGPROBS, "--readout",
        help=" | ".join(f"{n} (rows for `{readout_class(n).command}`)" for n in NAMES) + ".",
    ))  # fmt: skip
    keep: str = own(job_flag("keep", "validate"))
    show: int = own(typer.Option(20, min=0, help="Print at most this many errors."))


@command("validate", ValidateOwn, ("input", READOUT, "readout", "keep", "show"),
         short_help="Check an input file's rows without loading a model.")  # fmt: skip
def validate(door: Door[ValidateOwn]) -> None:
    """Check the schema and limits of an input file without loading a model."""
    from ..pipeline import loop  # lazy: keeps --help fast
    from ..pipeline.input.source import FileSource  # lazy: keeps --help fast
    from ..pipeline.output.sink import NullSink  # lazy: keeps --help fast
    from ..pipeline.runners.parse_only import ParseOnlyRunner  # lazy: keeps --help fast

    stack = contextlib.ExitStack()
    stop_on_signals()  # SIGTERM, as Ctrl-C, ends the command through `finally` (the default action skipped it)
    args = door.own
    input = args.input
    try:
        if read_once(input):
            input = _spool_stdin(stack, input)
        kept = tuple(k.strip() for k in args.keep.split(",") if k.strip())
        cfg, r = _job(input, args.readout, door.readout.given, kept)
        s, _ = loop.run(cfg, FileSource(cfg), NullSink(), ParseOnlyRunner(), readout=r)
    except OpenjevError as e:
        _fail(e)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM, e.g. while standard input is copied: the copy goes
        _stopped(e, None)
    finally:
        stack.close()  # removes standard input's copy, also on SIGTERM (it stayed in TMPDIR: issue 42)
    raise typer.Exit(_report(s, r.noun, args.show))


def _report(s, noun: str, show: int) -> int:
    """Print the first `show` errors and the counts line; the exit code (3 when a row has an error)."""
    c = s.counted
    rows, n_q, errors = s.rows, c.questions, c.errors
    for e in errors[:show]:
        err.print("[red]✗[/] ", end="")
        # a row's text: neither markup nor ESC codes, and one line per error (an id's newline printed raw
        # made a line that looked like another error's, issue 34.18)
        err.print(printable(e).replace("\n", "\\n"), markup=False, highlight=False)
    if len(errors) > show:
        err.print(f"… and {len(errors) - show} more")
    # per kind (the field an error names), the questions it makes errors: they add up to the total
    kinds: Counter[str] = Counter()
    for e, k in zip(errors, c.covers, strict=True):
        kinds[e.split(": ", 2)[1] if e.count(": ") >= 2 else e] += k

    def n(k: int, word: str) -> str:
        return f"{k:,} {word}{'' if k == 1 else 's'}"

    # counted as `run` counts them (its summary's "questions" and "errors"): every question of every row,
    # a row refused whole too, and the questions with an error (a refused row's all of them)
    counts = n(rows, "row") + (f", {n(n_q, noun)}" if noun != "row" else "")
    out.print(  # the error kinds quote the input's field names: escaped, never markup (hostile trial)
        printable(
            f"{counts}, {n(c.questions_with_errors, noun)} with errors"
            + (f" ({_kinds(kinds)})" if errors else "")
        ).replace("\n", "\\n"),
        markup=False,
        highlight=False,
    )
    return EXIT_ROW_ERRORS if errors else EXIT_OK


def _kinds(kinds: Counter[str], most: int = 5) -> str:
    """The `most` commonest error kinds with their counts, and what the rest add up to (a trial read five
    kinds that summed below the total as all of them)."""
    top = kinds.most_common(most)
    rest = sum(kinds.values()) - sum(v for _, v in top)
    left = len(kinds) - most
    # "995 more kinds: 995" read as a riddle (issue 48.8): the rest's count first, then how many kinds
    more = f", others: {rest:,} in {left:,} kind{'s' if left > 1 else ''}" if left > 0 else ""
    return ", ".join(f"{k}: {v}" for k, v in top) + more


def _job(input: Path, name: str, given: Mapping[str, Any], keep: tuple[str, ...]):
    """The job whose rows are checked and its readout, through the config door and the readouts registry
    `run` / `classify` use (the same refusals of --keep, --questions and --template). No model: a
    classifier's labels are not needed for its rows, and the backend is only a value the config requires."""
    from ..config import build_config  # lazy: keeps --help fast

    opts = dict(
        input=input, model="", backend=BACKENDS[0], readout=name, **{k: v or None for k, v in given.items()}
    )  # fmt: skip
    cfg = build_config(**opts, keep=() if keep == ("all",) else keep)
    if keep == ("all",):  # every input column the readout neither reads nor writes, as `run --keep all`
        from ..pipeline.input.read import all_columns  # lazy: keeps --help fast

        cfg = build_config(**opts, keep=all_columns(cfg))
    return cfg, build(name, cfg)
