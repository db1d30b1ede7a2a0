"""The command line's one entry: `python -m openjev_batch` and the `openjev-batch` console script
(pyproject's [project.scripts]) both call `entry`, so both get cli.main's one-line handlers (out of memory, a path
the system refuses, a closed pipe) and the spawn guard. The console script once named `cli:app`, Typer's app
itself, and a user's `openjev-batch` printed tracebacks that `python -m` turned into one line.

The import runs out of memory first under a low limit (`ulimit -v 150000`: a shared library "failed to map
segment"), before cli.main's own handler: that is one line too, not a traceback (issue 42)."""

import sys


def entry() -> None:
    try:
        from .cli import main  # lazy: out of memory during this import is said in one line below
    except Exception as e:  # noqa: BLE001 - only the system refusing memory is handled; anything else re-raised
        from .errors import OUT_OF_MEMORY, out_of_memory  # lazy: only when the import above failed

        if not out_of_memory(e):
            raise
        try:
            sys.stderr.write(f"error: {OUT_OF_MEMORY}\n")
        except (MemoryError, OSError):
            pass
        raise SystemExit(4) from None
    main()


if __name__ == "__main__":
    entry()
