"""Each option's CLI flag, from its one declaration: a job option's (job_options.JOB_OPTIONS, `job_flag`) and a
readout option's (its `Options` field and `Flag`, `readout_flag`), and which commands take an engine or job
option (`_takes`). cli/door.py makes every command's options of them; a command that declares one as its own
(`keep`) takes its flag from here too."""

from __future__ import annotations

import typing

import typer
from pydantic.fields import FieldInfo

from ..job_options import BY_NAME, JOB_COMMANDS, JobOption
from ..readouts import NAMES, readout_class
from ..readouts.flags import Flag


def _readout_of(command: str):
    """The readout class `command` runs (`Readout.command`); None for one that runs either (eval)."""
    return next((readout_class(n) for n in NAMES if readout_class(n).command == command), None)


def _takes(commands: tuple[str, ...], command: str) -> bool:
    """Whether an engine or job option declared for `commands` is a flag of `command`: named there, or every job
    command takes it (the default `commands`, JOB_COMMANDS) and `command` runs a readout (a new readout's
    command takes them with no edit to their declarations)."""
    return command in commands or (set(JOB_COMMANDS) <= set(commands) and _readout_of(command) is not None)


def job_flag(name: str, command: str):
    """`command`'s CLI option of the job option `name` (job_options.JOB_OPTIONS): its flag, help and
    default as declared there; a `per_readout` default is that of the command's readout (`--chunk-rows`:
    2048 for `run`, 20000 for `classify`), or for a command that runs either (eval) None, shown as each
    readout's (the config fills it in)."""
    o = BY_NAME[name]
    default = o.default
    shown: bool | str = True  # or the text click shows as the default
    if o.per_readout:
        kind = _readout_of(command)
        default = None if kind is None else getattr(kind, name)
        if kind is None:
            shown = "the readout's: " + ", ".join(f"{getattr(readout_class(n), name)} {n}" for n in NAMES)
            if name == "chunk_rows":  # eval's is a share of its questions (evaluation/run.eval_chunk_rows)
                shown = f"a 20th of the questions, at least 32, at most the readout's ({shown.split(': ', 1)[1]})"
    return typer.Option(default, o.cli_flag, help=o.help_for(command), show_default=shown, **o.cli)


def _cli_type(o: JobOption):
    """The flag's type: `cli_type`, else the field's without None (typer takes `int`, not `int | None`)."""
    return o.cli_type or next((t for t in typing.get_args(o.type) if t is not type(None)), o.type)


def readout_flag(name: str, field: FieldInfo, flag: Flag, command: str):
    """`command`'s CLI option of readout option `name`, from its one declaration: its `Options` field's default
    and bounds (ge/le → min/max), its `Flag`'s help (on `command`), short flag and shown default."""
    bounds = {k: v for m in field.metadata for k, v in (("min", getattr(m, "ge", None)), ("max", getattr(m, "le", None))) if v is not None}  # fmt: skip
    default = None if flag.shown is not None else field.default
    decls = ["--" + name.replace("_", "-"), *([flag.short] if flag.short else [])]
    return typer.Option(default, *decls, help=flag.help_for(command), show_default=flag.shown or True, **bounds)
