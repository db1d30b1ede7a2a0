"""The CLI door: a command's options come from their one declaration, made into click options in one place,
and the command's first act reads what it was given into one frozen, typed `Door`.

Declared elsewhere, generated here: the readout options (each readout's `Options` fields with their `Flag`s),
the engine options (options.ENGINE_OPTIONS), the job options (job_options.JOB_OPTIONS), serve's request
limits (serve/limits.Limits) and `--config FILE` (cli/jobfile.py). A command declares its own options (its
arguments, -o, -m) as the fields of a frozen dataclass, each with its typer option (`own(typer.Option(…))`),
and `layout` says where each generated group stands among them (their order in --help). `command()` makes
from these the one signature typer reads (typer builds its click options from a function's parameters only:
it reads no click decorators), and registers a callback that builds the `Door` and hands it to the command's
body: the command's own values, then the readout options (each text read as its `Flag` says: `\\n` escapes,
`@FILE`), the engine options (`--engine-arg` pairs parsed) and the job options, each its own typed part. So a
readout option (`--calibration`) and an engine option (`--connect`) reach the config by their own paths.
A value that cannot be read (an `@FILE` that cannot be, a bad `--engine-arg`, a limit out of its bounds) ends
the command here: one line, exit 4."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import typer

from ..errors import ConfigError
from ..job_options import JOB_OPTIONS, JobOptions
from ..options import ENGINE_OPTIONS, EngineOption
from ..readouts import command_options
from .app import _fail, app
from .job_options import _cli_type, _takes, job_flag, readout_flag
from .jobfile import load_job_file
from .options import _text_or_file, at_file, parse_engine_args, unescape

if typing.TYPE_CHECKING:
    from ..serve.limits import Limits

# where each generated group stands in a command's `layout` (beside the names of its own fields)
READOUT, ENGINE, JOB, LIMITS = "<readout options>", "<engine options>", "<job options>", "<request limits>"
OWN, CONFIG = "<own>", "<config>"
GROUPS = (READOUT, ENGINE, JOB, LIMITS)
OwnT = TypeVar("OwnT")


def own(info: Any) -> Any:
    """A command's own option, as a field of its dataclass: `info` is its typer option or argument."""
    return field(metadata={"cli": info})


@dataclass(frozen=True)
class ReadoutValues:
    """The readout options a command was given, by their `Options` field name (None: not given), each text
    read as its `Flag` says; `files`: the file an `@FILE` option's text was read from, by field name."""

    given: Mapping[str, Any]
    files: Mapping[str, Path] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineValues:
    """The engine options a command was given, by name (`engine_args`: the `--engine-arg` pairs parsed)."""

    given: Mapping[str, Any]


@dataclass(frozen=True)
class JobValues:
    """The job options a command was given (job_options.JOB_OPTIONS: those a config holds and the command
    line's own, --resume, --dry-run, --ray, --threads, …), read as attributes by their declared names."""

    given: Mapping[str, Any]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "given":  # copy/pickle probes: not an option
            raise AttributeError(name)
        try:
            return self.given[name]
        except KeyError:
            raise AttributeError(f"no job option {name!r}") from None

    def config(self) -> dict[str, Any]:
        """The job options a RunConfig / EvalConfig holds (JobOptions' fields)."""
        return {k: v for k, v in self.given.items() if k in JobOptions.model_fields}


@dataclass(frozen=True)
class Door(Generic[OwnT]):
    """What a command was given, read as its first act: its own values (`own`, its dataclass) and each group
    of generated options in its own part; serve's request limits as a checked `Limits`."""

    command: str
    own: OwnT
    readout: ReadoutValues
    engine: EngineValues
    job: JobValues
    limits: Limits | None = None


@dataclass(frozen=True)
class _Param:
    """One parameter typer reads: its name, typer option, annotation and the group it belongs to."""

    name: str
    info: Any
    annotation: Any
    group: str

    def parameter(self) -> inspect.Parameter:
        return inspect.Parameter(
            self.name, inspect.Parameter.KEYWORD_ONLY, default=self.info, annotation=self.annotation
        )


def _without_none(t: Any) -> Any:
    """The option's type without None (typer takes `int`, not `int | None`)."""
    return next((a for a in typing.get_args(t) if a is not type(None)), t)


def _engine_param(o: EngineOption) -> _Param:
    if isinstance(o.default, dict):  # key=value pairs, repeatable; typer's own metavar read `<list[str]>` (48.15)
        return _Param(o.name, typer.Option(None, o.cli_flag, help=o.help, metavar="KEY=VALUE"), list[str], ENGINE)
    return _Param(o.name, typer.Option(o.default, o.cli_flag, help=o.help), _without_none(o.type), ENGINE)


def _config_param(names: set[str]) -> _Param:
    # keys the command takes (`names`): serve (no input, no chunks) was offered `chunk-rows` and `input` (48.15)
    keys = "`chunk-rows: 512`, `input`, `model` too" if "input" in names else "`port: 8000`, `model` too"
    info = typer.Option(
        None, "--config", is_eager=True, callback=load_job_file, dir_okay=False,
        help=f"A JSON/YAML file of this command's options ({keys}); flags given here override it.",
    )  # fmt: skip
    return _Param("config", info, Path, CONFIG)


def _limit_params() -> list[_Param]:
    from ..serve.limits import Limits, flag  # lazy: serve's module, only for the command that takes them

    hints = typing.get_type_hints(Limits)
    return [
        _Param(x.name, typer.Option(x.default, flag(x.name), help=x.metadata["help"]), hints[x.name], LIMITS)
        for x in dataclasses.fields(Limits)
        if "help" in x.metadata
    ]


def _group(command: str, group: str, taken: set[str], engine_of: str) -> list[_Param]:
    """The generated options of `group` that `command` takes (not those it declares as its own, `taken`);
    the engine options those of `engine_of` (serve: run's)."""
    if group == READOUT:
        return [
            _Param(name, readout_flag(name, f, flag, command), flag.cli_type or _without_none(f.annotation), READOUT)
            for name, (f, flag) in command_options(command).items()
            if name not in taken
        ]  # fmt: skip
    if group == ENGINE:
        return [_engine_param(o) for o in ENGINE_OPTIONS if _takes(o.commands, engine_of) and o.name not in taken]
    if group == JOB:
        return [
            _Param(o.name, job_flag(o.name, command), _cli_type(o), JOB)
            for o in JOB_OPTIONS
            if _takes(o.commands, command) and o.name not in taken
        ]
    return _limit_params()


def parameters(command: str, own_type: type, layout: Sequence[str], engine_of: str | None = None) -> list[_Param]:
    """Every parameter of `command`, in `layout`'s order: its own fields by name, each group where it stands
    (the engine options those of `engine_of`, default `command`; a generated option named in `layout` stands
    there instead), and `--config` last where the command takes engine options (every command that runs a
    job)."""
    hints = typing.get_type_hints(own_type)
    mine = {f.name: _Param(f.name, f.metadata["cli"], hints[f.name], OWN) for f in dataclasses.fields(own_type)}
    groups = {g: _group(command, g, set(mine), engine_of or command) for g in layout if g in GROUPS}
    generated = {p.name: p for params in groups.values() for p in params}
    out: list[_Param] = []
    for item in layout:
        if item in groups:
            out.extend(p for p in groups[item] if p.name not in layout)
        else:
            out.append(mine[item] if item in mine else generated[item])
    return out + ([_config_param(set(mine))] if ENGINE in layout else [])


def _readout_values(command: str, given: dict[str, Any]) -> ReadoutValues:
    """The readout options as given, each text read as its `Flag` says (`\\n` escapes; `@FILE` that file's
    text, `@@TEXT` the text `@TEXT`). Raises ConfigError for a file that cannot be read."""
    flags = {name: flag for name, (_, flag) in command_options(command).items()}
    files = {}
    for name, value in list(given.items()):
        flag = flags[name]
        if value is None:
            continue
        if flag.escapes:
            given[name] = unescape(value)
        if flag.at_file:
            if (path := at_file(value)) is not None:
                files[name] = path
            given[name] = _text_or_file(value, "--" + name.replace("_", "-"))
    return ReadoutValues(given, files)


def read(command: str, own_type: type[OwnT], params: list[_Param], given: dict[str, Any]) -> Door[OwnT]:
    """The `Door` of `command` from the values click parsed (`given`, by parameter name). Ends the command
    (exit 4) for a value that cannot be read."""
    by_group: dict[str, dict[str, Any]] = {}
    for p in params:
        by_group.setdefault(p.group, {})[p.name] = given[p.name]
    try:
        engine = by_group.get(ENGINE, {})
        if "engine_args" in engine:
            engine["engine_args"] = parse_engine_args(engine["engine_args"] or [])
        readout = _readout_values(command, by_group.get(READOUT, {}))
        limits = _limits(by_group[LIMITS]) if LIMITS in by_group else None
    except ConfigError as e:
        _fail(e)
    job = JobValues(by_group.get(JOB, {}))
    return Door(command, own_type(**by_group.get(OWN, {})), readout, EngineValues(engine), job, limits)


def _limits(given: dict[str, Any]) -> Limits:
    from ..serve.limits import Limits  # lazy: serve's module, only for the command that takes them

    try:
        return Limits(**given)
    except ValueError as e:
        raise ConfigError(f"invalid options: {e}") from None


def command(
    name: str, own_type: type[OwnT], layout: Sequence[str], engine_of: str | None = None, **app_options: Any
) -> Callable[[Callable[[Door[OwnT]], None]], Callable[[Door[OwnT]], None]]:
    """Register the command `name` whose body takes its `Door`: typer reads the parameters of its own options
    (`own_type`'s fields) and of the generated groups in `layout` (the engine options those of `engine_of`);
    the body's docstring is its help."""

    def register(body: Callable[[Door[OwnT]], None]) -> Callable[[Door[OwnT]], None]:
        params = parameters(name, own_type, layout, engine_of)

        def callback(**given: Any) -> None:
            body(read(name, own_type, params, given))

        callback.__signature__ = inspect.Signature([p.parameter() for p in params])  # type: ignore[attr-defined]
        callback.__doc__, callback.__name__ = body.__doc__, body.__name__
        app.command(name, **app_options)(callback)
        return body

    return register
