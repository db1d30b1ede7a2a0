"""Domain errors, in one place. The CLI turns each into a message and an exit code (cli.py).

Row-level problems are never raised past the pipeline: they become `core.RowError` values and
an `error` cell in the output. The exceptions below end the whole job (or a command).
"""

from __future__ import annotations

OUT_OF_MEMORY = (
    "out of memory: the process could not get the memory it asked for (a limit such as `ulimit -v`, "
    "`prlimit --as` or a container's, or too little free RAM for this model)"
)


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` is the system refusing memory: a MemoryError, ENOMEM, or a library's text of it (the
    safetensors and torch loaders say "Cannot allocate memory" / "os error 12", the dynamic loader "failed
    to map segment"), so the message says memory instead of blaming the checkpoint (hostile trial under
    `prlimit --as`, issue 34)."""
    import errno

    if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM):
        return True
    if isinstance(e, SystemError) and _address_space_limited():
        # "error return without exception set": a C extension whose allocation failed returned NULL without
        # raising MemoryError. CI's plain install (transformers 5.25) met it importing transformers under
        # `prlimit --as=300M`, and it ended in a traceback. Only under a limit: elsewhere it is a real bug to show.
        return True
    text = str(e)
    # "failed to map segment from shared object": an ImportError of a library loaded past the limit
    return any(s in text for s in ("Cannot allocate memory", "os error 12", "failed to map segment"))


def _address_space_limited() -> bool:
    import resource

    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def os_error_text(e: OSError) -> str:
    """An OSError as a user reads it: `NAME: what happened`, without Python's `[Errno 36]` and quotes; a very
    long name shortened (a 300-character name was the whole message)."""
    what = e.strerror or str(e)
    if e.filename is None:
        return what
    name = str(e.filename)
    shown = name if len(name) <= 120 else f"{name[:60]}…{name[-20:]} ({len(name):,} characters)"
    return f"{shown}: {what[:1].lower()}{what[1:]}"


# Line breaks and other control characters of a name shown in a message or a display (an image file's name, a
# calibration file's question id): written as escapes, so data cannot forge a line (issue 48.7)
_ONE_LINE = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F)}


def one_line(name: str) -> str:
    """`name` with its control characters (a newline, a tab, ESC) written as escapes (`\\n`), not quoted."""
    return name.translate(_ONE_LINE)


class OpenjevError(Exception):
    """Base of every error the CLI reports as a message instead of a traceback."""

    exit_code = 2


class ConfigError(OpenjevError):
    """An option or config value is invalid (unknown key, bad value, conflicting options)."""


class InputFileError(OpenjevError):
    """The input file cannot be read at all (missing, wrong extension, unreadable, empty)."""


class InputWarning(UserWarning):
    """Input that is read as written but may not be what its author meant (a CSV quote left open?); the
    CLI prints it as one `warning:` line naming the file and line."""


class OptionWarning(InputWarning):
    """An option that runs as given but likely not as meant (`--debias-order K` below a question's option
    count); the CLI prints it as one `warning:` line."""


class LabelError(OpenjevError):
    """The tokenizer cannot provide enough verified single-token labels in the answer context."""


class PromptError(OpenjevError):
    """The chat template or tokenizer cannot give a prompt whose content stays text and whose prefix ids
    are the model's natural tokenization (checked once, at start-up)."""


class ModelFetchError(OpenjevError):
    """A packaged model could not be fetched or converted."""


class BackendError(OpenjevError):
    """A backend is unknown, not installed, or its model failed to load / the engine died."""


class OutputCheckError(OpenjevError):
    """The output does not hold exactly one row per input row × question; the partial output is kept."""


class OutputGoneError(OpenjevError):
    """`OUT.partial` or the output's folder was removed while the job ran; the message names which."""


class OutputBusyError(OpenjevError):
    """Another job holds the lock on this output (`<out>.lock`); the message names it."""


class OutputFinished(Exception):
    """Not an error, so no OpenjevError: `--resume` of an output its job already finished (the manifest the
    output carries is this job's and the input is the one it read; pipeline/output/manifest.py). Nothing
    is run or written; the CLI prints the message and exits 0."""


class JobInterrupted(KeyboardInterrupt):
    """The job was stopped by a signal: SIGINT (Ctrl-C, exit 130) or SIGTERM (schedulers: cron, Slurm,
    Kubernetes; exit 143). A KeyboardInterrupt subclass on purpose: asyncio and libraries that catch
    `Exception` (sglang's request path) let it through exactly as they let Ctrl-C through."""

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(signal.Signals(signum).name)


class EngineDied(KeyboardInterrupt):
    """Raised from the SIGQUIT handler that replaces sglang's (which SIGKILLs the whole process) while the
    job waits on the engine: a scheduler or detokenizer process failed. The backend turns it into a
    BackendError (exit 4) naming the process and its exit code; a KeyboardInterrupt subclass for the same
    reason as JobInterrupted (it must cross asyncio and sglang's `except Exception` blocks)."""
