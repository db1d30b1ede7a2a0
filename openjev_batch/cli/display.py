"""What the commands print: the progress bar (with the token rate), the dry-run plan, the most frequent errors."""

from __future__ import annotations

import contextlib

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import err, out


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


def _print_summary(command: str, readout, s) -> None:
    """The end-of-run table in the readout's vocabulary and, when some rows or questions have errors, how
    many and the most frequent ones."""
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
