"""`serve`: the systemone HTTP API over one engine and one readout held open (openjev_batch/serve/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import typer

from ..errors import ConfigError, OpenjevError
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
    debias order, layout), its request limits (serve/limits.py) and run's engine options are generated
    (cli/door.py)."""

    model: str = own(typer.Option(..., "--model", "-m", help="Hub id, local path, or a packaged name (`models list`)."))
    backend: str | None = own(BACKEND)
    host: str = own(typer.Option("127.0.0.1", "--host", help="Address to listen on."))
    port: int = own(typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."))
    served_model_name: str | None = own(typer.Option(
        None, "--served-model-name",
        help="The model id GET /v1/models lists and x-openjev-model names (default: the -m name). A request's "
        "`model` may be it, the -m name, jev-latest or any jev-* alias.",
    ))  # fmt: skip
    api_key: str | None = own(typer.Option(
        None, "--api-key", envvar="OPENJEV_API_KEY", show_envvar=True,
        help="A bearer key every request but /health and /health/live must send (401 without it).",
    ))  # fmt: skip
    allow_image_urls: bool = own(typer.Option(
        False, "--allow-image-urls",
        help="Fetch http(s) image URLs a request names (off: 422). A server that fetches what a client names is "
        "an SSRF hole: it reaches internal addresses on the client's behalf. Opt in only behind a trusted client.",
    ))  # fmt: skip
    max_branches: int = own(job_flag("max_branches", "run"))
    threads: int | None = own(job_flag("threads", "run"))


# `questions` (the readout's -q) where serve has always shown it, the other readout options after its own
LAYOUT = ("model", "backend", "host", "port", "questions", "served_model_name", "api_key", "allow_image_urls", READOUT,
          LIMITS, "max_branches", "threads", ENGINE)  # fmt: skip


@command("serve", ServeOwn, LAYOUT, engine_of="run", short_help="Serve the systemone HTTP API from one engine held open.")
def serve(door: Door[ServeOwn]) -> None:
    """Serve the seed's systemone API (openjev-sglang): POST /v1/systemone with `model`, `state` and `questions`
    gets `{model, answers, usage}`; POST /v1/records with one row (`id`, `state` or `messages`, `questions`)
    gets the columns and numbers `run` writes for that row."""
    import time

    from ..serve.app import SIGNAL_NAMES, Served, Stop  # lazy: keeps --help fast

    limits = cast("Limits", door.limits)  # serve's layout has them
    try:
        limits.within(_request_caps())  # before the model loads: a limit over the readout's own
    except ValueError as e:
        _fail(ConfigError(f"invalid options: {e}"))
    args = door.own
    served = Served(args.model, args.served_model_name or args.model, args.api_key or None, time.monotonic(),
                    args.allow_image_urls)  # fmt: skip
    stop = Stop()
    stop.install()  # before the model loads: a SIGTERM during start-up still ends the server with 143
    apply_threads_option(args.threads)
    code = run_server(stop, served, door, limits)
    if code:
        err.print(f"stopped ({SIGNAL_NAMES[code]}): the requests in flight were answered", markup=False)
    raise typer.Exit(code)


def _request_caps() -> dict[str, int]:
    """The served readout's own request limits (its `Request.caps`)."""
    from ..readouts import DEFAULT, readout_class  # lazy: keeps --help fast

    reader = readout_class(DEFAULT).Request
    return dict(reader.caps) if reader is not None else {}


def run_server(stop: Any, served: Any, door: Door[ServeOwn], limits: Limits) -> int:
    """Load the model (its Classifier held open with the readout options given, but `-q`), check the `-q`
    questions as `run` checks them, and serve until stopped: the exit code (143 / 130 after a drain). A
    failure ends the command (exit 4), and a stop during start-up with its own code, the model closed either
    way."""
    from ..api import Classifier  # lazy: keeps --help fast (torch, the backend)
    from ..serve.app import serve as serve_forever  # lazy: keeps --help fast (starlette, uvicorn)

    args = door.own
    opts = {k: v for k, v in door.readout.given.items() if k != "questions"}  # -q: the server's, below
    clf = None
    try:
        if opts.get("layout") is None:  # the seed's prompt, so a seed client gets the seed's numbers
            opts["layout"] = SERVE_LAYOUT
        clf = Classifier(_resolve(served.name), args.backend, **opts, max_branches=args.max_branches,
                         **door.engine.given)  # fmt: skip
        held = clf.held(door.readout.given.get("questions"))  # the -q questions checked as `run` checks them
        reader = type(held.readout).Request
        if reader is None:
            raise ConfigError(f"the {held.readout.name} readout is not served (it reads no request body)")
        layout = f" · prompt layout: {opts['layout']}{LAYOUT_NOTE[opts['layout']]}"  # named on the start-up line
        code = serve_forever(held, reader.held(held.readout, held.cfg), limits, args.host, args.port, served, stop,
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
