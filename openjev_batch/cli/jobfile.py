"""`--config job.yaml`: a job's options as data (lm-eval's `--config`, a nightly job kept in a file).

The file maps option names (as the command's flags, `chunk-rows` or `chunk_rows`; `input` and `model` too)
to values. They become the command's defaults (click's `default_map`), so a flag on the command line
overrides the file, and every value goes through the same conversion and checks as a typed flag. A key
the command does not take is refused, naming the keys it does: a misspelt option in a nightly job must
not be dropped silently. Relative paths are read as on the command line (from the working directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

import typer

from ..errors import ConfigError
from .app import _fail, _spelling

MAX_JOB_FILE_BYTES = 1 << 20  # a job file is options, not data: 1 MiB is far beyond any real one


def load_job_file(ctx: typer.Context, param: Any, value: Path | None) -> Path | None:
    """The eager `--config` callback: the file's options as this command's defaults."""
    if value is None or ctx.resilient_parsing:
        return value
    from ..data_files import load_data_file  # lazy: keeps --help fast (yaml)

    try:
        ctx.default_map = {**(ctx.default_map or {}), **_defaults(ctx, value, load_data_file)}
    except ConfigError as e:
        _fail(e)
    return value


def _defaults(ctx: typer.Context, path: Path, load) -> dict[str, Any]:
    raw = load(path, "--config", MAX_JOB_FILE_BYTES)
    if not isinstance(raw, dict):
        got = "nothing" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(f"--config {path}: must be a mapping of option names to values, got {got}")
    params = {p.name: p for p in ctx.command.params if p.name and p.name != "config"}
    # a flag's spelling (`--chunk-rows`, `-q`-less `questions`, `engine-arg`) names its parameter too
    names = dict((n, n) for n in params)
    for p in params.values():
        for flag in getattr(p, "opts", ()):
            if flag.startswith("--"):
                names.setdefault(flag[2:].replace("-", "_"), p.name)
    out: dict[str, Any] = {}
    for key, v in raw.items():
        name = names.get(str(key).replace("-", "_"))
        if name is None:
            known = ", ".join(sorted(_spelling(p) for p in params.values()))
            raise ConfigError(
                f"--config {path}: unknown option {key!r} for {ctx.command.name}; it takes: {known}"
            )
        if name in out:
            raise ConfigError(f"--config {path}: option {_spelling(params[name])!r} is given twice")
        out[name] = _value(path, params[name], v)
    return out


def _value(path: Path, param: Any, v: Any) -> Any:
    """A YAML value as click takes a default: a mapping for a repeatable key=value option
    (`engine_arg: {chunked_prefill_size: 8192}`) becomes its `key=value` strings; a list stays a list.
    click turns a bool or a float default into an integer option's int (`debias-order: true` was K = 1, no
    debiasing, silently; hostile trial): an integer option takes an integer (or its text) only."""
    name = _spelling(param)
    if _takes_int(param) and (isinstance(v, bool | float) or (isinstance(v, str) and not _int_text(v))):
        raise ConfigError(f"--config {path}: {name}: expected an integer, got {v!r}")
    # a wrong type for a flag or a number was click's usage error (exit 2) naming `--progress`, not the file,
    # while other keys' errors named the file (exit 4; hostile trial): each is the file's error now
    if _takes(param, bool) and not (isinstance(v, bool) or str(v).strip().lower() in _BOOL_TEXTS):
        raise ConfigError(f"--config {path}: {name}: expected true or false, got {_shown(v)}")
    if _takes(param, float) and not _float_value(v):
        raise ConfigError(f"--config {path}: {name}: expected a number, got {_shown(v)}")
    if getattr(param, "multiple", False):
        if isinstance(v, dict):
            return [f"{k}={json.dumps(x)}" for k, x in v.items()]
        # one value of a repeatable option, as its flag takes one (`engine-arg: "chunked_prefill_size=8192"`
        # was click's "Value must be an iterable", exit 2; hostile trial)
        return [v] if isinstance(v, str | int | float) and not isinstance(v, bool) else v
    # a one-value option takes one value: click made a list its Python repr (`system-prompt: [Be brief, Be
    # kind]` was the system message "['Be brief', 'Be kind']") or a message naming Python's types (issue 42)
    if isinstance(v, list | dict):
        got = "a list" if isinstance(v, list) else "a mapping"
        if name == "keep":
            raise ConfigError(
                f"--config {path}: keep: expected comma-separated column names as one text (`keep: tag` or "
                f"`keep: tag,channel`), got {got}"
            )
        raise ConfigError(f"--config {path}: {name}: expected one value, got {got}")
    if _takes_text(param) and isinstance(v, bool):  # YAML's unquoted yes/no/true/off: quote it to mean text
        raise ConfigError(f"--config {path}: {name}: expected text, got {str(v).lower()} (quote it for text)")
    return v


_BOOL_TEXTS = ("true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f")  # what a flag's text takes


def _shown(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) or v is None else repr(v)


def _int_text(v: str) -> bool:
    try:
        int(v)
    except ValueError:
        return False
    return True


def _float_value(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return False
    try:
        float(v)
    except ValueError:
        return False
    return True


def _takes(param: Any, t: type) -> bool:
    """An option whose annotation is `t` or `t | None`."""
    ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return ann is t or (t in get_args(ann) and not (set(get_args(ann)) - {t, type(None)}))


def _takes_text(param: Any) -> bool:
    """A text option: click's STRING type, or a `str` / `str | None` annotation."""
    return type(getattr(param, "type", None)).__name__ == "StringParamType" or _takes(param, str)


def _takes_int(param: Any) -> bool:
    """An integer option: click's INT or IntRange type, or (typer releases whose options carry no click type)
    an `int` or `int | None` annotation."""
    ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return type(getattr(param, "type", None)).__name__ in ("IntParamType", "IntRange") or ann is int or (
        int in get_args(ann) and str not in get_args(ann)
    )
