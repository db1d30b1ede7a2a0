"""`validate`: check an input file's rows (either readout) without a model."""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError
from . import EXIT_OK, EXIT_ROW_ERRORS, _fail, app, err, out, printable
from .options import STDIN_NAMES, _spool_stdin


# Length (over ~60 lines): mostly its typer options (the docstring is the command's --help).
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
    from ..pipeline.read import read_rows
    from ..schema import RowError

    stack = contextlib.ExitStack()
    try:
        if str(input) in STDIN_NAMES:
            input = _spool_stdin(stack)
        kept = tuple(k.strip() for k in keep.split(",") if k.strip())
        r = _readout(readout, questions, template, kept)
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
        err.print("[red]✗[/] ", end="")
        err.print(printable(e), markup=False, highlight=False)  # a row's text: neither markup nor ESC codes
    if len(errors) > show:
        err.print(f"… and {len(errors) - show} more")
    kinds = Counter(e.split(": ", 2)[1] if e.count(": ") >= 2 else e for e in errors)

    def n(k: int, word: str) -> str:
        return f"{k:,} {word}{'' if k == 1 else 's'}"

    # questions: those of the rows that parsed (a row refused whole has none to count)
    counts = f"{n(rows, 'row')}, {n(n_q, 'question')}" if readout == "label-logprobs" else n(rows, "row")
    out.print(
        f"{counts}, {n(len(errors), 'error')}"
        + (f" ({', '.join(f'{k}: {v}' for k, v in kinds.most_common(5))})" if errors else ""),
        highlight=False,
    )
    raise typer.Exit(EXIT_ROW_ERRORS if errors else EXIT_OK)


def _readout(name: str, questions, template, keep: tuple[str, ...]):
    """The readout whose rows are checked (no model: a classifier's labels are not needed for its rows)."""
    from ..config import check_keep, load_questions
    from ..readouts.classifier_head import DEFAULT_TEMPLATE, ClassifierHead, unescape_template
    from ..readouts.label_logprobs import LabelLogprobs

    if name in ("classifier-head", "label-logprobs"):
        try:  # what run / classify refuse of --keep, validate refuses too
            check_keep(keep, name)
        except ValueError as e:
            raise ConfigError(f"--keep: {e}") from None
    if name == "classifier-head":
        if questions:
            raise ConfigError("--questions is for run (label logprobs), not for a classifier head")
        return ClassifierHead(("?",), unescape_template(template) if template else DEFAULT_TEMPLATE, keep)
    if name == "label-logprobs":
        if template:
            raise ConfigError("--template is for classify (a classifier head)")
        return LabelLogprobs(load_questions(questions) if questions else None, keep)
    raise ConfigError(f"unknown readout {name!r}; expected label-logprobs or classifier-head")
