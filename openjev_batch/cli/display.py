"""What the commands print: the live progress bar, the dry-run plan, the end-of-run summary, the answer
distribution and the most frequent errors."""

from __future__ import annotations

import contextlib

from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError
from .app import STARTED, err, out, printable


def _cell(value: str):
    """A value the user named (the output path, the model's folder) as plain text in a table or line: rich
    would read its `[...]` as markup, and a terminal its control characters."""
    from rich.text import Text

    return Text(printable(str(value)))


def _print_top_errors(s) -> None:
    """The most frequent distinct errors with their counts (row names taken off; one example row each)."""
    shown = sum(c for c, _, _ in s.top_errors)
    width = len(f"{s.top_errors[0][0]:,}") if s.top_errors else 0
    for c, msg, where in s.top_errors:
        line = f"  {c:>{width},} × {msg}" + (f"  (e.g. {where})" if where else "")
        err.print(printable(line), markup=False, highlight=False)
    if s.errors > shown:
        err.print(f"  … and {s.errors - shown:,} more", markup=False, highlight=False)


def _print_plan(p, command: str = "run") -> None:
    t = Table(title=f"openjev-batch {command} --dry-run", show_header=False)
    this, mine = p.backend, " (this run's backend)"
    plans = p.by_backend.items()  # the run's backend first
    for k, v in [
        *([("model", p.model)] if p.model else []),
        *([("prompt layout", p.layout)] if p.layout else []),
        # the pattern each backend would use: another backend's said so (a new-user trial read it as this run's)
        *((f"request pattern{'' if n == this else f', if run on {n}'}", b.pattern) for n, b in plans if b.pattern),
        ("rows", f"{p.rows:,}"),
        ("questions", f"{p.questions:,}"),
        ("row/question errors", f"{p.errors:,}"),
        ("branches", f"{p.branches:,}"),
        ("logical tokens", f"{p.logical_tokens:,}"),
        *([("image tokens (a row's prefix once)", f"{p.image_tokens:,} in {p.images:,} images")] if p.images else []),
        *((f"unique tokens, {n} ({b.cache})", f"{b.unique_tokens:,}") for n, b in plans),
        *((words, f"{v:,}") for words, v in p.by_backend[this].more.items() if v),
        *((f"expected cache hit rate, {n}{mine if n == this else ''}", f"{p.hit_rate(n):.1%}") for n, _ in plans),
        ("windows", f"{p.windows:,}"),
        ("wall time", f"{p.wall_s:.1f} s"),
        ("peak RSS", f"{p.peak_rss_mb:,.0f} MiB"),
    ]:
        t.add_row(k, _cell(v))
    out.print(t)


class _Bar(Progress):
    """rich's Progress drawn two columns short of the terminal. Drawn full width, its last line leaves the
    cursor in the last column, so the `^C` the terminal echoes wraps onto a new line; the final redraw then
    clears that line and moves up one line too few, and the bar's first line was on screen twice after a
    Ctrl-C. With two spare columns the echo stays on the bar's line, which the redraw overwrites."""

    def get_renderable(self):
        from rich.constrain import Constrain

        whole = super().get_renderable()
        if not hasattr(self, "live"):  # rich's __init__ asks before its Live (and so the console) exists
            return whole
        return Constrain(whole, max(self.console.width - 2, 1))


@contextlib.contextmanager
def _progress(label: str, noun: str, enabled: bool):
    """A rich progress bar on stderr over the job's live counts (pipeline/progress.py): records and rows done
    against the total, percentage, tokens/s, cache hit rate, ETA. Redrawn twice a second by rich's own
    thread, so elapsed time, rates and ETA move between events. Yields the `Progress` the jobs update, or
    None when disabled (then nothing is counted up front)."""
    if not enabled:
        yield None
        return
    from rich.text import Text

    from ..pipeline.progress import Heartbeat  # lazy: keeps --help fast
    from ..pipeline.progress import Progress as JobProgress  # lazy: keeps --help fast

    job = JobProgress()
    if not err.is_terminal:  # a log: a bar drawn in place would show nothing until the job ends
        with Heartbeat(job, label, noun, _log_line, heartbeat_s()):
            yield job
        return

    class Counts(ProgressColumn):
        def render(self, task) -> Text:
            return Text(job.text(noun))

    bar = _Bar(
        TextColumn(f"[bold]{label}"),
        BarColumn(bar_width=None),
        TaskProgressColumn(),
        Counts(),
        TimeElapsedColumn(),
        console=err,
        refresh_per_second=2,
    )
    task = bar.add_task(label, total=None)

    def moved(p) -> None:
        # drawn from the first count on (the first chunk read): a job refused at once (missing file, bad
        # questions, no model) prints its error alone, without an empty bar above it
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=p.records_done, total=p.total_records)

    job.listener = moved
    try:
        yield job
    finally:
        if bar.live.is_started:
            bar.stop()


HEARTBEAT_S = 60.0


def heartbeat_s() -> float:
    """Seconds between the progress lines written to a log: OPENJEV_HEARTBEAT_S, default HEARTBEAT_S.
    Raises ConfigError for a value that is not a number of seconds above 0."""
    import math
    import os

    raw = os.environ.get("OPENJEV_HEARTBEAT_S", "").strip()
    if not raw:
        return HEARTBEAT_S
    try:
        every = float(raw)
    except ValueError:
        every = math.nan
    if not (every > 0 and math.isfinite(every)):
        raise ConfigError(f"OPENJEV_HEARTBEAT_S={raw!r}: expected a number of seconds above 0")
    return every


def _log_line(text: str) -> None:
    err.print(text, markup=False, highlight=False, soft_wrap=True)


def _print_summary(command: str, readout, s, threads: str | None = None) -> None:
    """The end-of-run table in the readout's vocabulary (with the CPU thread count used, `threads`) and,
    when some rows or questions have errors, how many and the most frequent ones."""
    t = Table(title=f"openjev-batch {command}", show_header=False)
    for k, v in [
        *([("model", s.model)] if s.model else []),
        *([("backend", s.backend)] if s.backend else []),
        *([("tokenizer", s.tokenizer)] if s.tokenizer else []),
        *([("CPU threads", threads)] if threads else []),
        *([("request pattern", s.pattern)] if s.pattern else []),
        *([("start-up (in the wall time)", s.startup)] if s.startup else []),
        *_timed(readout.summary_rows(s)),
    ]:
        t.add_row(k, _cell(v))
    if s.resumed_chunks:  # "1: 0" was unreadable (issue 48.16)
        n, which = len(s.resumed_chunks), _ranges(s.resumed_chunks)
        t.add_row("chunks resumed (read back from the partial, not run again; counted above)",
                  f"{n:,} (chunk{'s' if n > 1 else ''} {which})")  # fmt: skip
    if s.reused_rows is not None:  # --reuse: the rows copied from earlier outputs, whose tokens are not counted
        t.add_row("rows (--reuse)", f"reused {s.reused_rows:,} · computed {s.rows - s.reused_rows:,}")
    err.print(t)
    for note in s.reuse_notes:  # an earlier output that gave nothing: why
        err.print(f"note: {note}", markup=False)
    _print_answers(s)
    _warn_abstained(readout, s)
    if s.errors:
        err.print(
            f"[yellow]{s.errors} {readout.noun}(s) have errors[/]: see the `error` column of ",
            _cell(s.output),
            sep="",
        )
        _print_top_errors(s)


def _timed(rows):
    """The readout's rows with its `wall time` said to be the job's, and the time since the command started
    beside it (Python, torch and the model's resolution before the job; issue 48.13)."""
    import time

    for k, v in rows:
        yield (k, f"{v} (the job: model load to output)") if k == "wall time" else (k, v)
        if k == "wall time":
            yield "since the command started", f"{time.monotonic() - STARTED:.1f} s (imports and model lookup too)"


def _ranges(chunks) -> str:
    """Chunk indices as ranges: 0–3, 7, 9–10."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(chunks):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def _print_answers(s, max_questions: int = 30, max_options: int = 12) -> None:
    """Per question: rows per option, their share and mean confidence (calibrated: how many abstained) —
    what a person checks first after a labelling job; multi questions in their own table, counted in rows
    (a row may choose several labels or none). Long jobs are cut to the first questions and each question's
    most frequent options."""
    answers, multi = s.answers, set(s.multi)
    single = {q: v for q, v in answers.items() if q not in multi}
    labels = {q: v for q, v in answers.items() if q in multi}
    cols = ["question", "option", "rows", "share", "mean confidence", *(["abstained"] if s.abstained else [])]
    _answers_table(single, s, cols, "answers", max_questions, max_options)
    # share of the question's answered rows; the confidence column is the mean P(yes) of the label in the rows
    # that chose it (issue 42.3: "share" divided by all chosen labels, and "mean confidence" held P(yes))
    cols = ["question", "label", "rows choosing it", "share of rows", "mean P(yes) when chosen"]
    _answers_table(labels, s, cols, "labels chosen (multi questions)", max_questions, max_options)


def _answers_table(answers: dict, s, cols: list[str], title: str, max_questions: int, max_options: int) -> None:
    if not answers:
        return
    t = Table(*cols, title=title)
    blank = [""] * (len(cols) - 2)
    for qid, opts in list(answers.items())[:max_questions]:
        n = s.answered_rows.get(qid) or sum(c for _, c, _ in opts) or 1
        abstained = s.abstained.get(qid)
        order = sorted(range(len(opts)), key=lambda i: -opts[i][1])[:max_options]
        shown = order if len(opts) > max_options else range(len(opts))
        for i, j in enumerate(shown):
            opt, count, conf = opts[j]
            t.add_row(  # ids and option names are the input's text: escaped, never markup (hostile trial)
                Text(printable(qid)) if i == 0 else "",
                Text(printable(opt)),
                f"{count:,}",
                f"{count / n:.0%}",
                "–" if conf is None else f"{conf:.2f}",
                *([] if len(cols) < 6 else ["–" if abstained is None else f"{abstained[j]:,}"]),
            )
        if len(opts) > len(shown):
            t.add_row("", f"… {len(opts) - len(shown)} more options", *blank)
    if len(answers) > max_questions:
        t.caption = f"first {max_questions} of {len(answers)} questions"
    elif "share of rows" in cols:
        t.caption = "share: rows choosing the label / answered rows (a row chooses any number of labels)"
    err.print(t)


def _warn_abstained(readout, s) -> None:
    """One `warning:` line (a log grep finds it) per calibrated question that abstained on more than half its
    answered rows (pipeline.summary.abstain_warnings; issue 42.1)."""
    from ..pipeline.summary import abstain_warnings  # lazy: display stays light for --help

    for line in abstain_warnings(s, readout):
        err.print(printable(f"warning: {line}"), markup=False, highlight=False, soft_wrap=True)
