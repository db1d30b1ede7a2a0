"""`Flag`: how a readout option shows on the command line and in the Python API, beside the one `Options`
field that declares it (readouts/base.ReadoutOptions). Light: the CLI reads it for every command's --help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Flag:
    """How a readout option shows beyond its `Options` field (which holds its one default and bounds), put in
    the field's annotation (`Annotated[int, Flag("…")] = Field(1, ge=1, le=64)`): the CLI flag of its
    readout's command is generated from it (`--debias-order`: the field's name; cli/job_options.py), and so
    are the flags of the other commands in `also` ("eval": an EvalConfig field too; "validate"; "serve": the
    held-open readout's), and the
    Python API's keyword (a Classifier's, or with `per_run` its `run`'s). `short`: a short flag (`-q`);
    `cli_type`: the flag's type where the field's is wider (questions: a file path, or the API's mapping);
    `shown`: the default as --help names it (the flag's own default is then None: not given); `escapes`:
    `\\n`, `\\t` in the flag's text are a newline and a tab; `at_file`: `@FILE` gives the text of FILE (and
    `@@TEXT` the text `@TEXT`), read by the CLI's door (cli/door.py); `helps`: (command, help) where a command
    in `also` says more than `help`."""

    help: str
    also: tuple[str, ...] = ()
    short: str | None = None
    cli_type: Any = None
    shown: str | None = None
    escapes: bool = False
    per_run: bool = False
    at_file: bool = False
    helps: tuple[tuple[str, str], ...] = ()

    def help_for(self, command: str) -> str:
        """The flag's help on `command`."""
        return dict(self.helps).get(command, self.help)
