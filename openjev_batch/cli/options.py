"""Options shared by several commands, declared once: the engine options (options.ENGINE_OPTIONS → CLI
options), stdin input, packaged model names, quieting the libraries' own progress bars."""

from __future__ import annotations

import contextlib
import os
import stat
import typing
from pathlib import Path

import typer

from ..errors import ConfigError, InputFileError
from ..readouts.label_logprobs.questions import MAX_QUESTION_BYTES
from ..threads import apply_threads, default_threads
from ..values import read_at_most


def parse_engine_args(pairs: list[str]) -> dict[str, typing.Any]:
    """`key=value` strings → dict; values parsed as YAML scalars (numbers, booleans, null, strings)."""
    import yaml

    out: dict[str, typing.Any] = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--engine-arg expects key=value, got {p!r}")
        out[key.strip().replace("-", "_")] = yaml.safe_load(val) if val else ""
    return out


_SPOOLED: dict[str, str] = {}  # the temporary files that stand for `-` (or a pipe) → the name given


# what names standard input: `-`, and the device files a shell user reaches for (a named file there is a
# pipe or terminal that can be read once and has no extension to tell its format)
STDIN_NAMES = ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")


def read_once(name: str | Path) -> bool:
    """Whether the input `name` can be read only once: standard input, or a path that is neither a file nor
    a folder (a FIFO, a shell's `<(zcat …)`, a device), which the readers' second open hung on (issue 34)."""
    if str(name) in STDIN_NAMES:
        return True
    try:
        mode = os.stat(name).st_mode
    except (OSError, ValueError):
        return False  # missing or unreadable: the input checks say so
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _spool_stdin(stack: contextlib.ExitStack, name: str | Path = "-") -> Path:
    """`-` (or a pipe `name`, read_once): its content copied to a temporary file (removed when the command
    ends), named by its format. Messages name it as given (`stdin_name`), not the temporary path the user
    never gave."""
    import tempfile

    from ..pipeline.input.stdin import spool_stdin  # lazy: keeps --help fast

    name = "-" if str(name) in STDIN_NAMES else str(name)
    _refuse_device(name)
    try:
        folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="openjev-stdin-"))
        if name == "-":
            path = spool_stdin(folder)
        else:
            # opened without waiting for a writer (a pipe whose writer has gone hung here: issue 42); reads
            # then wait for a writer still writing, and a pipe without one reads as empty
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as pipe:
                path = spool_stdin(folder, pipe, name)
    except OSError as e:  # a full or unwritable TMPDIR: `validate -` ended in a traceback (issue 25)
        what = "standard input" if name == "-" else "the pipe"
        raise InputFileError(
            f"{name}: cannot copy {what} to a temporary file in {tempfile.gettempdir()}: "
            f"{e.strerror or e} (set TMPDIR to a folder with room)"
        ) from None
    _SPOOLED.update(dict.fromkeys({str(path), str(path.resolve())}, name))
    return path


def _refuse_device(name: str) -> None:
    """Raise InputFileError for an input that is a device (`/dev/zero`, `/dev/urandom`, a disk), named or on
    standard input: its bytes never end, and copying them wrote 29 GB to TMPDIR before the disk check
    stopped it (issue 42). A terminal on standard input and /dev/null (empty) are read as before."""
    try:
        mode = os.fstat(0).st_mode if name == "-" else os.stat(name).st_mode
        null = os.stat(os.devnull).st_rdev
        rdev = os.fstat(0).st_rdev if name == "-" else os.stat(name).st_rdev
    except (OSError, ValueError):
        return  # the copy says what is wrong
    if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) or rdev == null or (name == "-" and os.isatty(0)):
        return
    what = "standard input" if name == "-" else name
    raise InputFileError(f"{what}: a device, not a file or a pipe; give the input as a file (or pipe it)")


def stdin_name(message: str) -> str:
    """`message` with each spool file named as the user gave it (`-`, or the pipe's path)."""
    for p, name in _SPOOLED.items():
        message = message.replace(p, name)
    return message


def _quiet(progress: bool) -> None:
    """--no-progress also silences the libraries' own bars (transformers' 'Loading weights', hub downloads),
    which would otherwise fill nightly job logs."""
    if not progress:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def _resolve(model: str, tokenizer_only: bool = False) -> str:
    """A packaged name → its folder; `tokenizer_only`: the command needs no weights (a packaged tokenizer
    is then accepted)."""
    from ..packaged_models import resolve_model  # lazy: keeps --help fast

    return resolve_model(model, tokenizer_only)


# Options several commands take (run, classify, eval, validate), declared once (typer copies an option's
# info per command); the job options' flags are generated from job_options.JOB_OPTIONS, the readout options'
# from each readout's `Options` (cli/job_options.py).
BACKEND = typer.Option(
    None, "--backend", "-b", help="hf | sglang (default: sglang where installed and a GPU is present)."
)


def unescape(text: str) -> str:
    """`\\n`, `\\t` and `\\\\` in a command-line text (`--template`) → newline, tab, backslash."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def show_prompt_option(what: str):
    """--show-prompt (run, eval): the prompts of the first N `what`."""
    return typer.Option(
        None,
        "--show-prompt",
        min=1,
        help=f"Print what the model gets for the first N {what} and exit; tokenizer only, no -o.",
    )




def at_file(value: str) -> Path | None:
    """The file a `@PATH` option value names; None for text, `@@` included."""
    return Path(value[1:]) if value.startswith("@") and not value.startswith("@@") else None


def ray_options(ray: bool, address: str | None, workers: int | None, gpus_per_worker: float | None):
    """--ray's options as a RayOptions (pipeline/runners/ray), None without --ray (run, classify, eval).
    Raises ConfigError for a --ray option given without --ray."""
    if not ray:
        if address or workers is not None or gpus_per_worker is not None:
            raise ConfigError("--ray-address, --workers and --gpus-per-worker need --ray")
        return None
    from ..pipeline.runners.ray import RayOptions  # lazy: keeps --help fast

    return RayOptions(
        address=address, workers=1 if workers is None else workers, gpus_per_worker=gpus_per_worker
    )


def _text_or_file(value: str, option: str) -> str:
    """An option's text, or with `@PATH` that file's content (UTF-8); `@@TEXT` is the text `@TEXT` (a literal
    leading `@` could not be given otherwise). Raises ConfigError for a file that cannot be read."""
    if not value.startswith("@"):
        return value
    if value.startswith("@@"):
        return value[1:]
    try:
        # read no more than the option's limit allows (`@/dev/zero` was read to its end, issue 25)
        raw = read_at_most(value[1:], MAX_QUESTION_BYTES + 3)
        if len(raw) > MAX_QUESTION_BYTES + 3:
            raise ConfigError(f"{option} {value}: over {MAX_QUESTION_BYTES:,} bytes, its limit")
        return raw.decode("utf-8-sig")  # a BOM is not text, as in the input files
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{option} {value}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def apply_threads_option(threads: int | None) -> str:
    """Apply --threads (or its default, the idle cores) before torch is imported (default_backend, the
    backends); returns what the summary says of it: a slow run on a busy machine is often its thread count."""
    given, threads = threads, threads or default_threads()
    if threads:
        apply_threads(threads)
        return f"{threads} ({'--threads' if given else 'default: the idle cores'})"
    return f"{os.environ.get('OMP_NUM_THREADS')} (OMP_NUM_THREADS)"
