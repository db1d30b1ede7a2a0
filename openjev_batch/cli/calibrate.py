"""`calibrate`: fit per-question temperatures and abstain thresholds (multi: label thresholds) on labelled
rows, for `run --calibration` (evaluation/calibration_fit.py and calibration_multi.py have the fit,
readouts/label_logprobs/calibration.py the file and how it is applied)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError
from ..readouts.label_logprobs.calibration import MIN_KEPT
from .app import _fail, app, err, out, printable


@app.command(short_help="Fit a temperature and an abstain threshold per question.")
def calibrate(
    labelled: Path = typer.Argument(
        ..., help="A `run` output with a kept gold column (.parquet, .jsonl, .json, .csv), or an eval folder."
    ),
    gold: str = typer.Option(
        None,
        "--gold",
        help="The column of gold answers: an option's name or index (multi: the labels that apply) "
        "[default: an eval folder's gold; a file needs it].",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The calibration file to write (.json)."),
    target_precision: float = typer.Option(
        None,
        min=0.0,
        max=1.0,
        help="Abstain below the confidence that keeps this selective accuracy [default: 0.9].",
    ),
    target_coverage: float = typer.Option(
        None, min=0.0, max=1.0, help="Instead: abstain below the confidence that keeps this share of answers."
    ),
    question: list[str] = typer.Option(
        None, "--question", metavar="ID",
        help="Fit only this question id (repeatable): the one --gold labels. Default: all.",
    ),
    min_kept: int = typer.Option(
        MIN_KEPT,
        "--min-kept",
        min=1,
        help="A target counts as met only on at least this many kept answers (multi: chosen labels), and "
        "--target-precision only when the 95% Wilson lower bound of their accuracy reaches it.",
    ),
    holdout: float = typer.Option(
        None,
        "--holdout",
        help="Fit on the other rows and report ECE, Brier, coverage and selective accuracy on this share of "
        "them (between 0 and 1, exclusive; a seeded split by row id), beside the fit's own figures.",
    ),
    unfitted: str = typer.Option(
        "error", "--unfitted", help="What `run --calibration` does with a question the file has no entry for: "
        "error (refuse it) or raw (answer it uncalibrated).",
    ),
) -> None:
    """Fit, per question, a temperature and an abstain threshold (multi: the P(yes) its labels are chosen at);
    print the selective-accuracy/coverage curve (multi: precision and recall)."""
    try:
        doc = fit_file(labelled, gold, output, target_precision, target_coverage, tuple(question or ()), min_kept,
                       holdout, unfitted)  # fmt: skip
    except OpenjevError as e:
        _fail(e)
    write_and_print(doc, output)


def fit_file(labelled: Path, gold: str | None, output: Path, target_precision: float | None, target_coverage: float | None,
             questions: tuple[str, ...], min_kept: int, holdout: float | None, unfitted: str) -> dict:  # fmt: skip
    """The calibration document of `calibrate`'s options, checked before anything is read (no precision and no
    coverage: a precision of 0.9). Raises ConfigError (OpenjevError)."""
    from ..evaluation.calibration_fit import fit  # lazy: keeps --help fast
    from ..evaluation.calibration_labelled import (  # lazy: keeps --help fast
        fitted_debias_order,
        read_labelled,
    )

    if target_precision is not None and target_coverage is not None:
        raise ConfigError("calibrate: give --target-precision or --target-coverage, not both")
    if target_coverage is None and target_precision is None:
        target_precision = 0.9
    check_output(output, labelled)
    if unfitted not in ("error", "raw"):
        raise ConfigError(f"calibrate: --unfitted must be error or raw, got {unfitted!r}")
    if gold is None:  # an eval folder names its gold column; a run output's is whatever the user kept
        if not labelled.is_dir():
            raise ConfigError(f"calibrate: give --gold COL, the column of {labelled} that holds the gold answers")
        gold = "gold"
    if holdout is not None and not 0 < holdout < 1:
        raise ConfigError(f"calibrate: --holdout must be between 0 and 1 (a share of the rows), got {holdout}")
    records = read_labelled(labelled, gold, questions)
    doc = fit(records, target_precision, target_coverage, min_kept, holdout, unfitted)
    if (k := fitted_debias_order(labelled)) is not None:  # run --calibration refuses another order
        doc["debias_order"] = k
    return doc


def check_output(output: Path, labelled: Path) -> None:
    """`-o`: a .json file, not a folder nor the labelled input, in a folder that exists and is writable.
    Raises ConfigError."""
    from ..config import check_output_path  # lazy: keeps --help fast

    if output.is_dir():
        raise ConfigError(f"calibrate: -o {output} is a folder: give the calibration file's path")
    if output.suffix.lower() != ".json":
        raise ConfigError(f"calibrate: -o must be a .json file, got {output}")
    if output.exists() and labelled.exists() and os.path.samefile(output, labelled):
        raise ConfigError(f"calibrate: -o {output} is the labelled input: writing it would destroy it")
    try:
        check_output_path(output, any_format=True)  # the folder exists and is writable; no FIFO, not in /dev
    except ValueError as e:
        raise ConfigError(f"calibrate: {e}") from None


def write_and_print(doc: dict, output: Path) -> None:
    """The calibration file written atomically, its curves printed, and a warning per question whose target was
    missed (every row of it will abstain)."""
    from ..evaluation.calibration_fit import curve_table, missed  # lazy: keeps --help fast

    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(output)  # atomic: a nightly job never reads half a file
    out.print(printable(curve_table(doc)), markup=False, highlight=False, end="", soft_wrap=True)
    out.print(f"wrote {output}", markup=False, highlight=False)
    for qid in missed(doc):  # one line a log grep finds: this file makes every row of the question abstain
        note = doc["questions"][qid]["note"]
        err.print(printable(f"warning: calibrate: question {qid!r}: {note}"), markup=False, highlight=False)
