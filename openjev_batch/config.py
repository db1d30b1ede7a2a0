"""The run configuration: frozen and validated once, at the CLI edge. Unknown keys are errors.

`RunConfig` is the engine options (options.py, each declared once) plus the job's own options and the
readout's (`readout`, and its own options type nested as `readout_options`: readouts/); `build_config`
validates them into one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .core import ANSWER_KEY
from .errors import ConfigError
from .job_options import JobOptions
from .options import BACKENDS, EngineOptions, output_format
from .readouts import DEFAULT, NAMES, base_columns, foreign_option, option_names, readout_class
from .readouts.base import ReadoutOptions
from .values import no_symlink_loop, option_text_problem


def check_output_path(v: Path, any_format: bool = False) -> Path:
    """A writable .parquet path (with `any_format`: .parquet, .jsonl or .csv) in an existing folder
    (checked before any model loads). Raises ValueError."""
    no_symlink_loop(v)
    if (why := _not_a_file_place(v)) is not None:
        raise ValueError(why)
    # pyarrow's file system takes UTF-8 paths only (the folder's name counts too: it is made absolute)
    if (problem := option_text_problem(str(v.absolute()))) is not None:
        raise ValueError(f"output {str(v.absolute())!r}: {problem}")
    if any_format:
        output_format(v)
    elif v.suffix.lower() != ".parquet":
        raise ValueError(f"output must be a .parquet file, got {v}")
    if v.is_dir():
        raise ValueError(f"{v} is a directory")
    if not v.resolve().parent.is_dir():
        raise ValueError(f"folder {v.resolve().parent} does not exist")
    if not os.access(v.resolve().parent, os.W_OK):
        raise ValueError(f"folder {v.resolve().parent} is not writable")
    if (why := _cannot_write(v)) is not None:
        raise ValueError(why)
    return v


# Folders of devices and kernel files: `-o /dev/stdout.parquet` made a regular file in /dev (attack trial, issue
# 48.5). /dev/shm is a plain tmpfs that people write to on purpose.
_SYSTEM_FOLDERS = (Path("/dev"), Path("/proc"), Path("/sys"))
_TO_STDOUT = "-o - writes JSONL to standard output, for a pipe or a terminal"


def _not_a_file_place(v: Path) -> str | None:
    """Why `v` is no place for an output file: it names a named pipe, device or socket (the output is written
    whole and renamed into place, which silently replaced a FIFO with a regular file), or it lies in /dev,
    /proc or /sys. None when it is a file, a folder or nothing yet (the other checks name those)."""
    import stat

    try:
        mode = os.stat(v).st_mode  # stat never waits on a FIFO (opening one does)
    except (OSError, ValueError):
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        return (f"{v} is {kind}, not a file: the output is written whole and renamed into place, which would "
                f"replace it; give a file's path ({_TO_STDOUT})")  # fmt: skip
    folder = v.resolve().parent
    around = (folder, *folder.parents)
    if any(d in around for d in _SYSTEM_FOLDERS) and Path("/dev/shm") not in around:
        system = "a system folder (devices, kernel files), not a place for files"
        return f"{v}: {folder} is {system}; give a file's path ({_TO_STDOUT})"
    return None


def _cannot_write(v: Path) -> str | None:
    """Why the job could not put its output at `v`, found by trying before it runs: os.access says yes to
    root for a read-only folder, and an immutable file (`chattr +i`) or a read-only file system let the
    whole job run, then failed at the final rename (hostile trial). None when it can."""
    import errno
    import tempfile

    folder = v.resolve().parent
    try:
        fd, probe = tempfile.mkstemp(prefix=".openjev-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"folder {folder} is not writable ({e.strerror})"
    try:  # an existing output: opened for writing without truncating (its content stays as it is)
        os.close(os.open(v, os.O_WRONLY | os.O_NONBLOCK))
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno in (errno.EPERM, errno.EROFS):  # immutable: the rename onto it would fail the same way
            return f"{v} cannot be replaced ({e.strerror}); move it away or choose another -o"
    return None


def _same_file(a: Path, b: Path) -> bool:
    """Whether `a` and `b` name one file: the same path once resolved, or two names of one inode (a hard
    link, a bind mount)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def check_not_input(output: Path, input: Path | None, what: str = "the input file") -> None:
    """Raises ValueError when the output, or a file the job writes beside it (`OUT.partial`, `OUT.lock`,
    `OUT.manifest.json`), is `input` (`what` names it: the input, the -q file, the --system-prompt file), so
    the job would destroy its own input (hostile trial, issue 25: `-o` over the questions or system-prompt
    file)."""
    if input is None:
        return
    no_symlink_loop(Path(input))  # resolve() below raised RuntimeError on a loop (`--calibration`, issue 42)
    out = Path(output)
    beside = (out.with_name(out.name + s) for s in (".partial", ".lock", ".manifest.json"))
    for path in (out, *beside):
        if _same_file(path, input):
            name = "output" if path == out else f"the output's {path.name[len(out.name) :]} file"
            raise ValueError(f"{name} {path} is {what}; writing it would destroy it (choose another -o)")
    partial = out.with_name(out.name + ".partial").resolve()
    if Path(input).resolve().is_relative_to(partial):  # a fresh run clears the partial: the input with it
        raise ValueError(
            f"{what} {input} is inside {partial.name}, which this job clears (choose another -o)"
        )


def validation_message(e: ValidationError) -> str:
    """pydantic errors as one line: `field: why; …` (model-level errors without a field)."""
    return "; ".join(
        (f"{'.'.join(map(str, err['loc']))}: " if err["loc"] else "")
        + err["msg"].removeprefix("Value error, ")
        for err in e.errors()
    )


def check_keep(v: tuple[str, ...], readout: str = DEFAULT) -> tuple[str, ...]:
    """Kept columns must not clash with an output column of the readout or repeat. Raises ValueError."""
    if clash := [k for k in v if k in (*base_columns(readout), ANSWER_KEY)]:
        raise ValueError(f"--keep column(s) {', '.join(clash)} clash with output columns; rename them")
    if len(set(v)) != len(v):
        raise ValueError(f"a column is named twice in {', '.join(v)}")
    for k in v:  # an output column name: Arrow and Parquet hold UTF-8 only (a traceback at the write)
        if (problem := option_text_problem(k)) is not None:
            raise ValueError(f"column name {k!r}: {problem}")
    return v


class RunConfig(EngineOptions, JobOptions):
    """One job: the engine options and the job options (each declared once: options.py, job_options.py);
    `readout` says what its rows ask (label-logprobs: `run`; classifier-head: `classify`), and
    `readout_options` holds that readout's own options, of its `Options` type (readouts/). The flat keywords
    of the CLI and the API (`questions=…`, `template=…`) go to it, as the engine options' go to their
    backend's; another readout's option is refused naming the command it belongs to."""

    input: Path
    output: Path | None = None  # None only for --dry-run (plans, writes nothing)
    model: str
    backend: str
    readout: str = DEFAULT
    readout_options: SerializeAsAny[ReadoutOptions] = Field(default_factory=ReadoutOptions)
    keep: tuple[str, ...] = ()  # the CLI's --keep is comma-separated text (job_options.JOB_OPTIONS)
    kv_budget_tokens: int | None = Field(None, gt=0)
    # whether the input has image rows, read before the engine starts (pipeline.job.choose_images; None: not
    # read yet): the sglang engine then starts multimodal (backends/sglang/images.py)
    images: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _readout_options(cls, data: Any) -> Any:
        """The readout's options (flat keywords) into its `Options` type, and its default chunk size."""
        return _nest_readout_options(data, set(cls.model_fields)) if isinstance(data, dict) else data

    @field_validator("input")
    @classmethod
    def _resolvable(cls, v: Path) -> Path:
        return no_symlink_loop(v)

    @field_validator("output")
    @classmethod
    def _output(cls, v: Path | None) -> Path | None:
        return None if v is None else check_output_path(v, any_format=True)

    @model_validator(mode="after")
    def _not_the_input(self) -> RunConfig:
        if self.output is not None:
            check_not_input(self.output, self.input)
            for path, what in self.readout_options.files():
                check_not_input(self.output, path, what)
        return self

    @field_validator("readout", "backend")
    @classmethod
    def _registered(cls, v: str, info: ValidationInfo) -> str:
        """A readout or backend by a name its registry knows."""
        known = NAMES if info.field_name == "readout" else BACKENDS
        if v not in known:
            raise ValueError(f"unknown {info.field_name} {v!r}; expected one of {', '.join(known)}")
        return v

    @model_validator(mode="after")
    def _keep(self) -> RunConfig:
        try:
            check_keep(self.keep, self.readout)
        except ValueError as e:
            raise ValueError(f"keep: {e}") from None
        return self


def _nest_readout_options(data: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """`data` (a RunConfig's keywords) with each readout option (`questions=…`, `template=…`) moved into the
    chosen readout's `Options` as `readout_options`, and `chunk_rows` the readout's when not given. Raises
    ValueError for another readout's option (set) or a bad value; an unknown readout is left to the field."""
    try:
        kind = readout_class(data.get("readout", DEFAULT))
    except ConfigError:
        return data
    out, given = dict(data), dict(data.get("readout_options") or {})
    out.pop("readout_options", None)
    for k in [k for k in data if k in option_names() and k not in fields]:
        v = out.pop(k)
        if v is None:  # not given (the API's and the CLI's default): the Options' own default
            continue
        if (why := foreign_option(kind.name, k)) is None:
            given[k] = v
        else:  # each readout declares the options it reads: another's is refused
            raise ValueError(why)
    if out.get("chunk_rows") is None:
        out["chunk_rows"] = kind.chunk_rows
    try:
        out["readout_options"] = kind.Options(**given)
    except ValidationError as e:
        raise ValueError(validation_message(e)) from None
    return out


def build_config(**kw: Any) -> RunConfig:
    """Validate options into a RunConfig. Raises ConfigError naming each bad field, and each option the chosen
    backend does not read (`--tp-size` for hf, `--batch-tokens` for sglang: refused here, before a Ray
    cluster or a model starts)."""
    try:
        cfg = RunConfig(**kw)
    except ValidationError as e:
        raise ConfigError("invalid options: " + validation_message(e)) from None
    cfg.check_backend(cfg.backend)
    return cfg
