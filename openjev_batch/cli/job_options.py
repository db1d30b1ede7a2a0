"""How a command gets its options, generated from their one declaration: the engine options
(options.ENGINE_OPTIONS, `_engine_options`), the readout options (each readout's `Options` fields with their
`Flag`s: a command's `readout_opts` parameter, `_readout_options`) and the job options
(job_options.JOB_OPTIONS): a command's `job`
parameter stands for them all and receives them as one dict (`_job_options`, applied by `_engine_options`);
one the command declares itself (`keep: str = job_flag("keep", "run")`) takes its flag from there too."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path

import typer
from pydantic.fields import FieldInfo

from ..errors import ConfigError
from ..job_options import BY_NAME, JOB_COMMANDS, JOB_OPTIONS, JobOption
from ..options import ENGINE_OPTIONS
from ..readouts import NAMES, command_options, readout_class
from ..readouts.flags import Flag
from .app import _fail
from .jobfile import load_job_file
from .options import parse_engine_args, unescape

JOB: dict = {}  # where a command's job options go (`_job_options`); never a CLI option itself


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


def _job_options(command: str, own: typing.Collection[str] = ()):
    """Put the job options `command` takes (JOB_OPTIONS, each with `command`'s help and default; not those
    in `own`, which the command declares itself with `job_flag`) where the command's `job` parameter stands;
    the command receives them as one dict `job`. Applied by `_engine_options`, inside it: its `--config`
    stays last."""
    declared = [o for o in JOB_OPTIONS if _takes(o.commands, command) and o.name not in own]
    params = [
        inspect.Parameter(
            o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=job_flag(o.name, command),
            annotation=_cli_type(o),
        )
        for o in declared
    ]  # fmt: skip

    def deco(f):
        @functools.wraps(f)
        def wrapper(**kw):
            job = {o.name: kw.pop(o.name) for o in declared}
            return f(**kw, job=job)

        return _expand(f, wrapper, "job", params)

    return deco


READOUT: dict = {}  # where a command's readout options go (`_readout_options`); never a CLI option itself


def readout_flag(name: str, field: FieldInfo, flag: Flag):
    """The CLI option of readout option `name`, from its one declaration: its `Options` field's default and
    bounds (ge/le → min/max), its `Flag`'s help, short flag and shown default."""
    bounds = {k: v for m in field.metadata for k, v in (("min", getattr(m, "ge", None)), ("max", getattr(m, "le", None))) if v is not None}  # fmt: skip
    default = None if flag.shown is not None else field.default
    decls = ["--" + name.replace("_", "-"), *([flag.short] if flag.short else [])]
    return typer.Option(default, *decls, help=flag.help, show_default=flag.shown or True, **bounds)


def _readout_options(command: str):
    """Put the readout options `command` takes (readouts.command_options: its readout's `Options` fields and
    other readouts' that name `command` in their `Flag.also`) where the command's `readout_opts` parameter
    stands; the command receives them as one dict of config keywords (None: not given; a `Flag.escapes`
    text unescaped). A new readout's option is a flag of its command with no edit here."""
    declared = command_options(command)
    params = [
        inspect.Parameter(
            name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=readout_flag(name, field, flag),
            annotation=flag.cli_type or next((t for t in typing.get_args(field.annotation) if t is not type(None)), field.annotation),
        )
        for name, (field, flag) in declared.items()
    ]  # fmt: skip

    def deco(f):
        @functools.wraps(f)
        def wrapper(**kw):
            own = {name: kw.pop(name) for name in declared}
            for name, (_, flag) in declared.items():
                if flag.escapes and own[name] is not None:
                    own[name] = unescape(own[name])
            return f(**kw, readout_opts=own)

        return _expand(f, wrapper, "readout_opts", params)

    return deco


ENGINE: dict = {}  # where a command's engine options go (`_engine_options`); never a CLI option itself


def _engine_options(command: str):
    """Put the engine options options.ENGINE_OPTIONS declares for `command` where the command's `engine`
    parameter stands, each as its CLI option; the command receives them as one dict `engine` of config
    fields (`--engine-arg key=value` pairs parsed). A `job` parameter likewise becomes the job options
    (`_job_options`). Also `--config FILE` (cli/jobfile.py): every command that runs a job takes its options
    from a file."""
    declared = [o for o in ENGINE_OPTIONS if _takes(o.commands, command)]

    def option(o) -> inspect.Parameter:
        if isinstance(o.default, dict):  # key=value pairs, repeatable
            annotation, default = list[str], None
        else:
            annotation = next((t for t in typing.get_args(o.type) if t is not type(None)), o.type)
            default = o.default
        # a repeatable key=value pair: typer's own metavar read `<list[str]>` (issue 48.15)
        metavar = "KEY=VALUE" if isinstance(o.default, dict) else None
        info = typer.Option(default, o.cli_flag, help=o.help, metavar=metavar)
        return inspect.Parameter(
            o.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=annotation
        )

    def config(own) -> inspect.Parameter:
        # keys the command takes: serve (no input, no chunks) was offered `chunk-rows` and `input` (issue 48.15)
        keys = "`chunk-rows: 512`, `input`, `model` too" if "input" in own else "`port: 8000`, `model` too"
        return inspect.Parameter(
            "config", inspect.Parameter.KEYWORD_ONLY, annotation=Path,
            default=typer.Option(
                None, "--config", is_eager=True, callback=load_job_file, dir_okay=False,
                help=f"A JSON/YAML file of this command's options ({keys}); flags given here override it.",
            ),
        )  # fmt: skip

    def deco(f):
        own = inspect.signature(f).parameters
        extra = [config(own)]
        if "readout_opts" in own:
            f = _readout_options(command)(f)
        if "job" in own:
            f = _job_options(command, own)(f)

        @functools.wraps(f)
        def wrapper(**kw):
            kw.pop("config", None)  # applied as the command's defaults when it was parsed
            engine = {o.name: kw.pop(o.name) for o in declared}
            if "engine_args" in engine:
                try:
                    engine["engine_args"] = parse_engine_args(engine["engine_args"] or [])
                except ConfigError as e:  # parsed before the command's own error handling: same exit 4
                    _fail(e)
            return f(**kw, engine=engine)

        return _expand(f, wrapper, "engine", [option(o) for o in declared], extra)

    return deco


def _expand(f, wrapper, name: str, params: list[inspect.Parameter], extra=()):
    """`wrapper` (of `f`) with the signature typer reads: `f`'s parameter `name` replaced by `params`, and
    `extra` at the end."""
    sig = inspect.signature(f, eval_str=True)
    out = []
    for p in sig.parameters.values():
        out.extend(params if p.name == name else [p])
    out.extend(extra)
    wrapper.__signature__ = sig.replace(parameters=out)
    wrapper.__annotations__ = {p.name: p.annotation for p in out}
    return wrapper
