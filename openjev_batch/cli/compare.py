"""`compare OLD NEW`: what moved between two outputs, per question (pipeline/compare.py), as a table,
`--json` or `--plot FILE.png`; exit 5 (`EXIT_DRIFT`) when a question's PSI passes `--max-drift`, so a cron
job can alert. `run --baseline OLD` prints the same tables after its summary (`print_baseline`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer
from rich.table import Table

from ..errors import OpenjevError
from .app import EXIT_FAILED, _fail, app, err, out

EXIT_DRIFT = 5  # a question's answers moved more than --max-drift (PSI)
PSI_ALERT = 0.25  # pipeline/drift.PSI_ALERT (not imported here: the CLI loads the pipeline lazily)


@app.command(short_help="What moved between two outputs: shares, drift, changed rows.")
def compare(
    old: Path = typer.Argument(..., help="The earlier output (.parquet, .jsonl, .jsonl.gz, .csv, .tsv)."),
    new: Path = typer.Argument(..., help="The later output."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON (for machines)."),
    plot: Path = typer.Option(None, "--plot", help="Also draw each question's shares, old against new, as a PNG."),
    max_drift: float = typer.Option(
        PSI_ALERT, "--max-drift", min=0.0,
        help="Exit 5 when a question's PSI is over this (0.1: a moderate shift, 0.25: a major one).",
    ),  # fmt: skip
) -> None:
    """Per question: each option's share, old against new; the PSI (drift, gated by --max-drift) and
    Jensen–Shannon divergence; the χ² p-value; mean confidence, label mass and abstention rate; the rows in
    both whose answer changed. Exit codes: 0 nothing over --max-drift, 5 a question over it, 4 an output
    that cannot be read."""
    from ..pipeline.compare import compare as compare_outputs  # lazy: keeps --help fast
    from ..pipeline.compare import plot as draw  # lazy: keeps --help fast

    try:
        c = compare_outputs(old, new, max_drift)
        if plot is not None:
            draw(c, plot)
    except OpenjevError as e:
        _fail(e)
    except OSError as e:  # the plot's folder is missing or not writable
        err.print(f"error: {plot}: {e.strerror or e}", markup=False)
        raise typer.Exit(EXIT_FAILED) from None
    if as_json:
        out.print_json(json.dumps(c.to_dict(), allow_nan=False, default=str))
    else:
        print_comparison(c, out)
    if drifted := c.drifted():
        err.print(f"drift: {', '.join(drifted)} moved more than --max-drift {max_drift:g} (PSI)", markup=False)
        raise typer.Exit(EXIT_DRIFT)


def print_baseline(baseline: Path, output: Path) -> None:
    """`run --baseline`: the comparison of the run's output with `baseline`, after its summary (on stderr,
    as the summary is). A baseline that cannot be read is a warning: the job itself succeeded."""
    from ..pipeline.compare import compare as compare_outputs  # lazy: keeps --help fast

    try:
        c = compare_outputs(baseline, output)
    except OpenjevError as e:
        err.print(f"warning: --baseline: {e}", markup=False)
        return
    print_comparison(c, err)


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _pair(p: tuple, fmt: str = ".3f") -> str:
    return f"{_num(p[0], fmt)} → {_num(p[1], fmt)}"


def print_comparison(c, console) -> None:
    """One table per question: each option's rows and share, old and new; then its statistics."""
    for q in c.questions:
        d = q.drift
        flag = " [bold red]over --max-drift[/]" if d.over(c.max_drift) else ""
        t = Table(title=f"{q.question}: PSI {_num(d.psi)}{flag}", title_justify="left")
        for col in ("option", "old rows", "old share", "new rows", "new share", "Δ share"):
            t.add_column(col, justify="left" if col == "option" else "right")
        to, tn = sum(d.old) or 1, sum(d.new) or 1
        for o, a, b in zip(d.options, d.old, d.new, strict=True):
            t.add_row(o, f"{a:,}", f"{a / to:.1%}", f"{b:,}", f"{b / tn:.1%}", f"{(b / tn - a / to) * 100:+.1f} pt")
        console.print(t)
        ids = f" (e.g. {', '.join(q.changed_ids)})" if q.changed_ids else ""
        console.print(
            f"  PSI {_num(d.psi)} (alert over {c.max_drift:g}) · Jensen–Shannon {_num(d.js, '.4f')} · "
            f"χ² {_num(d.chi2, '.2f')} (df {d.dof}), p {_num(d.p_value, '.3g')}\n"
            f"  answered {q.answered[0]:,} → {q.answered[1]:,} · mean confidence {_pair(q.confidence)} · "
            f"label mass {_pair(q.label_mass, '.3g')} · abstained {_pair(q.abstain_rate, '.1%')}\n"
            f"  rows in both: {q.common:,}, answer changed: {q.changed:,}{ids}",
            markup=False, highlight=False,
        )  # fmt: skip
