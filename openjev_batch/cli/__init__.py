"""The `openjev-batch` command line. It only parses options, builds one frozen RunConfig, calls the
library, and turns domain errors into messages and exit codes — here and nowhere else (app.py).

Top-down: this module imports the commands (run.py, validate.py, evaluate.py, calibrate.py, models.py, compare.py), which register
themselves on app.py's `app`; nothing in cli/ imports this module back.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys

from ..errors import OUT_OF_MEMORY, os_error_text, out_of_memory

# Under an address-space limit (`prlimit --as`, a container's ulimit) OpenBLAS, loaded with numpy, reserves a
# buffer per core at import and, when that fails, aborts the process from C ("OpenBLAS error: Memory allocation
# still failed", exit 1) before Python can say "out of memory". One thread there needs one buffer; numpy's BLAS
# does no heavy work in this product (torch has its own). Without a limit nothing changes.
if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# torch keeps its compile cache in TMPDIR by default (`torchinductor_<user>/`, made as soon as transformers
# imports torch._dynamo, whether anything compiles or not): every run, stopped or not, left one there (issue
# 48.9). It goes beside the packaged models' cache (OPENJEV_CACHE) instead; a TORCHINDUCTOR_CACHE_DIR the user
# set is kept, and sglang's processes inherit it.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    from ..packaged_models import cache_dir

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir().parent / "torchinductor")

from .app import EXIT_FAILED, _quiet_exit, app, printable

__all__ = ["app", "main", "printable"]

# The commands register themselves on `app` when their modules load (this order is `--help`'s).
from . import run, validate, evaluate, calibrate, models, serve, compare  # noqa: E402, F401, I001


def main() -> None:  # pragma: no cover - the entry point (`python -m openjev_batch`, the console script)
    # lazy: keeps --help fast (backends/__init__ is light, but only the guard needs it)
    from ..backends import refuse_unguarded_main

    refuse_unguarded_main()  # a script wrapping the CLI without a main guard, re-run by sglang's spawn
    try:
        app()
    except BrokenPipeError:  # a plain write (`-o -`, --show-prompt) to a reader that closed the pipe
        _quiet_exit()
    except Exception as e:  # out of memory anywhere (an import, a read, a tokenizer): one line, not a traceback
        if out_of_memory(e):
            message = OUT_OF_MEMORY
        elif isinstance(e, OSError):  # a path the system refuses (a name too long, a loop, no permission)
            # where no check named it: one line, not a traceback ending in `OSError: [Errno 36] …` (issue 42)
            message = printable(os_error_text(e))
        else:
            raise
        # plain text: rich's rendering imports and allocates, and failed here again under `prlimit --as`
        with contextlib.suppress(MemoryError, OSError):
            sys.stderr.write(f"error: {message}\n")
        raise SystemExit(EXIT_FAILED) from None


if __name__ == "__main__":  # pragma: no cover
    main()  # exits 0 when it returns
