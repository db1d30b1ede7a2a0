"""`python -m openjev_batch`: the command line (cli.main). Its import runs out of memory first under a low limit
(`ulimit -v 150000`: a shared library "failed to map segment"), before cli.main's own handler: that is one line
too, not a traceback (issue 42)."""

import sys

try:
    from .cli import main
except Exception as e:  # noqa: BLE001 - only the system refusing memory is handled; anything else re-raised
    from .errors import OUT_OF_MEMORY, out_of_memory

    if not out_of_memory(e):
        raise
    try:
        sys.stderr.write(f"error: {OUT_OF_MEMORY}\n")
    except (MemoryError, OSError):
        pass
    raise SystemExit(4) from None

main()
