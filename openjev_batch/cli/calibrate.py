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
        ...,
        "--gold",
        help="The column of gold answers: an option's name or index (multi: the labels that apply).",
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
        None, "--question", help="Fit only this question id (repeatable): the one --gold labels. Default: all."
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
        "them (a seeded split by row id), beside the fit's own figures.",
    ),
    unfitted: str = typer.Option(
        "error", "--unfitted", help="What `run --calibration` does with a question the file has no entry for: "
        "error (refuse it) or raw (answer it uncalibrated).",
    ),
) -> None:
    """Fit, per question, a temperature and an abstain threshold (multi: the P(yes) its labels are chosen at);
    print the selective-accuracy/coverage curve (multi: precision and recall)."""
    from ..config import check_output_path  # lazy: keeps --help fast
    from ..evaluation.calibration_fit import (  # lazy: keeps --help fast
        curve_table,
        fit,
        missed,
        read_labelled,
    )

    try:
        if target_precision is not None and target_coverage is not None:
            raise ConfigError("calibrate: give --target-precision or --target-coverage, not both")
        if target_coverage is None and target_precision is None:
            target_precision = 0.9
        if output.is_dir():
            raise ConfigError(f"calibrate: -o {output} is a folder: give the calibration file's path")
        if output.suffix.lower() != ".json":
            raise ConfigError(f"calibrate: -o must be a .json file, got {output}")
        if output.exists() and labelled.exists() and os.path.samefile(output, labelled):
            raise ConfigError(f"calibrate: -o {output} is the labelled input: writing it would destroy it")
        try:
            check_output_path(output.with_suffix(".parquet"))  # the folder exists and is writable
        except ValueError as e:
            raise ConfigError(f"calibrate: {e}") from None
        if unfitted not in ("error", "raw"):
            raise ConfigError(f"calibrate: --unfitted must be error or raw, got {unfitted!r}")
        if holdout is not None and not 0 < holdout < 1:
            raise ConfigError(f"calibrate: --holdout must be between 0 and 1 (a share of the rows), got {holdout}")
        records = read_labelled(labelled, gold, tuple(question or ()))
        doc = fit(records, target_precision, target_coverage, min_kept, holdout)
        doc["unfitted"] = unfitted
    except OpenjevError as e:
        _fail(e)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(output)  # atomic: a nightly job never reads half a file
    out.print(printable(curve_table(doc)), markup=False, highlight=False, end="", soft_wrap=True)
    out.print(f"wrote {output}", markup=False, highlight=False)
    for qid in missed(doc):  # one line a log grep finds: this file makes every row of the question abstain
        note = doc["questions"][qid]["note"]
        err.print(printable(f"warning: calibrate: question {qid!r}: {note}"), markup=False, highlight=False)
