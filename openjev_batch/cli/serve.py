"""`serve`: the systemone HTTP API over one engine and one readout held open (openjev_batch/serve/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import typer

from ..errors import OpenjevError
from .app import EXIT_FAILED, _fail, err
from .door import ENGINE, LIMITS, READOUT, Door, command, own
from .job_options import job_flag
from .options import BACKEND, _resolve, apply_threads_option

if TYPE_CHECKING:
    from ..serve.limits import Limits

# serve's prompt layout when --layout is not given (run's and the API's is transcript: README "Prompt layouts")
SERVE_LAYOUT = "systemone"
LAYOUT_NOTE = {"systemone": " (the seed's prompt; --layout transcript for run's default)",
               "transcript": " (run's default prompt; the seed's is --layout systemone)"}  # fmt: skip


@dataclass(frozen=True)
class ServeOwn:
    """serve's own options; its readout options (`-q` and the held readout's: the system prompt, calibration,
    debias order), its request limits (serve/limits.py) and run's engine options are generated (cli/door.py)."""

    model: str = own(typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name (`models list`)."))
    backend: str | None = own(BACKEND)
    host: str = own(typer.Option("127.0.0.1", "--host", help="Address to listen on."))
    port: int = own(typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."))
    max_branches: int = own(job_flag("max_branches", "run"))
    threads: int | None = own(job_flag("threads", "run"))


@command(
    "serve", ServeOwn, ("model", "backend", "host", "port", READOUT, LIMITS, "max_branches", "threads", ENGINE),
    engine_of="run", short_help="Serve the systemone HTTP API from one engine held open.",
)  # fmt: skip
def serve(door: Door[ServeOwn]) -> None:
    """Serve the systemone API: POST /v1/systemone with one row (`id`, `state` or `messages`, `questions`) gets
    one answer per question, with the columns and numbers `run` writes for that row."""
    from ..serve.app import Stop  # lazy: keeps --help fast

    stop = Stop()
    stop.install()  # before the model loads: a SIGTERM during start-up still ends the server with 143
    apply_threads_option(door.own.threads)
    code = run_server(stop, door)
    if code:
        err.print(
            f"stopped ({'SIGTERM' if code == 143 else 'SIGINT'}): the requests in flight were answered",
            markup=False,
        )
    raise typer.Exit(code)


def run_server(stop: Any, door: Door[ServeOwn]) -> int:
    """Load the model (its Classifier held open with the readout options given, but `-q`), check the `-q`
    questions as `run` checks them, and serve until stopped: the exit code (143 / 130 after a drain). A
    failure ends the command (exit 4), and a stop during start-up with its own code, the model closed either
    way."""
    from ..api import Classifier  # lazy: keeps --help fast (torch, the backend)
    from ..serve.app import serve as serve_forever  # lazy: keeps --help fast (starlette, uvicorn)
    from ..serve.request import held_readouts  # lazy: keeps --help fast

    clf = None
    try:
        args = door.own
        held = {k: v for k, v in door.readout.given.items() if k != "questions"}  # -q: the server's, below
        if held.get("layout") is None:  # the seed's prompt, so a seed client gets the seed's numbers
            held["layout"] = SERVE_LAYOUT
        clf = Classifier(_resolve(args.model), args.backend, **held, max_branches=args.max_branches,
                         **door.engine.given)  # fmt: skip
        # the -q questions checked as `run` checks them
        cfg, readouts = held_readouts(clf, door.readout.given.get("questions"))
        layout = f" · prompt layout: {held['layout']}{LAYOUT_NOTE[held['layout']]}"  # named on the start-up line
        limits = cast(Limits, door.limits)  # serve's layout has them
        code = serve_forever(clf, cfg, readouts, limits, args.host, args.port, args.model, stop,
                             lambda s: err.print(s + (layout if s.startswith("serving ") else ""), markup=False,
                                                 highlight=False))  # fmt: skip
    except OpenjevError as e:
        if clf is not None:
            clf.close()
        if stop.code is not None:  # a stop during start-up: that is the exit, not the failure it caused
            raise typer.Exit(stop.code) from None
        _fail(e)
    except KeyboardInterrupt:  # a stop raised inside a library while the model loaded
        if clf is not None:
            clf.close()
        raise typer.Exit(stop.code or EXIT_FAILED) from None
    else:
        clf.close()
        return code
