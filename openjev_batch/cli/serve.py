"""`serve`: the systemone HTTP API over one engine and one readout held open (openjev_batch/serve/)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError
from ..serve.limits import Limits, flag
from .app import EXIT_FAILED, _fail, app, err
from .job_options import ENGINE, READOUT, _engine_options, _expand, _readout_options, job_flag
from .options import BACKEND, _resolve, _text_or_file, apply_threads_option

# serve's prompt layout when --layout is not given (run's and the API's is transcript: README "Prompt layouts")
SERVE_LAYOUT = "systemone"
LAYOUT_NOTE = {"systemone": " (the seed's prompt; --layout transcript for run's default)",
               "transcript": " (run's default prompt; the seed's is --layout systemone)"}  # fmt: skip
LIMITS = Limits()  # where serve's request limits go (`_limit_options`); never a CLI option itself


def _limit_options(f):
    """Put the request limits (serve/limits.Limits: each field with a help, its default and help declared
    there) where the command's `limits` parameter stands, each as its CLI option; the command receives them as
    one `Limits`, a limit out of its bounds refused before the command runs (exit 4 naming its flag)."""
    hints = typing.get_type_hints(Limits)
    declared = [x for x in dataclasses.fields(Limits) if "help" in x.metadata]
    params = [
        inspect.Parameter(
            x.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints[x.name],
            default=typer.Option(x.default, flag(x.name), help=x.metadata["help"]),
        )
        for x in declared
    ]  # fmt: skip

    @functools.wraps(f)
    def wrapper(**kw):
        given = {x.name: kw.pop(x.name) for x in declared}
        try:
            limits = Limits(**given)
            limits.within(_request_caps())  # before the model loads: a limit over the readout's own
        except ValueError as e:
            _fail(ConfigError(f"invalid options: {e}"))
        return f(**kw, limits=limits)

    return _expand(f, wrapper, "limits", params)


def _request_caps() -> dict[str, int]:
    """The served readout's own request limits (its `Request.caps`)."""
    from ..readouts import DEFAULT, readout_class  # lazy: keeps --help fast

    reader = readout_class(DEFAULT).Request
    return dict(reader.caps) if reader is not None else {}


@app.command(short_help="Serve the systemone HTTP API from one engine held open.")
@_engine_options("run")
@_readout_options("serve")  # applied first: serve takes run's held-engine options, not its --questions
@_limit_options
def serve(
    model: str = typer.Option(
        ..., "--model", "-m", help="Hub id, local path, or a packaged name (`models list`)."
    ),
    backend: str = BACKEND,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
    questions: Path = typer.Option(
        None,
        "--questions",
        "-q",
        help="JSON/YAML question map: a request may ask these by id (or, without `questions`, all of them).",
    ),
    served_model_name: str = typer.Option(
        None, "--served-model-name",
        help="The model id GET /v1/models lists and x-openjev-model names (default: the -m name). A request's "
        "`model` may be it, the -m name, jev-latest or any jev-* alias.",
    ),
    api_key: str = typer.Option(
        None, "--api-key", envvar="OPENJEV_API_KEY", show_envvar=True,
        help="A bearer key every request but /health and /health/live must send (401 without it).",
    ),
    allow_image_urls: bool = typer.Option(
        False, "--allow-image-urls",
        help="Fetch http(s) image URLs a request names (off: 422). A server that fetches what a client names is "
        "an SSRF hole: it reaches internal addresses on the client's behalf. Opt in only behind a trusted client.",
    ),
    readout_opts: dict = READOUT,  # run's system prompt, calibration and debias order (their Flag names serve)
    limits: Limits = LIMITS,  # --max-questions … --max-batch (serve/limits.py)
    max_branches: int = job_flag("max_branches", "run"),
    threads: int = job_flag("threads", "run"),
    engine: dict = ENGINE,
) -> None:
    """Serve the seed's systemone API (openjev-sglang): POST /v1/systemone with `model`, `state` and `questions`
    gets `{model, answers, usage}`; POST /v1/records with one row (`id`, `state` or `messages`, `questions`)
    gets the columns and numbers `run` writes for that row."""
    import time

    from ..serve.app import SIGNAL_NAMES, Served, Stop  # lazy: keeps --help fast

    served = Served(model, served_model_name or model, api_key or None, time.monotonic(), allow_image_urls)
    stop = Stop()
    stop.install()  # before the model loads: a SIGTERM during start-up still ends the server with 143
    apply_threads_option(threads)
    opts = dict(readout_opts, max_branches=max_branches)
    code = run_server(stop, served, backend, questions, opts, engine, limits, host, port)
    if code:
        err.print(f"stopped ({SIGNAL_NAMES[code]}): the requests in flight were answered", markup=False)
    raise typer.Exit(code)


def run_server(stop, served, backend: str, questions: Path | None, opts: dict, engine: dict, limits: Limits,
               host: str, port: int) -> int:  # fmt: skip
    """Load the model (its Classifier held open with the readout options `opts`), check the `-q` questions as
    `run` checks them, and serve until stopped: the exit code (143 / 130 after a drain). A failure ends the
    command (exit 4), and a stop during start-up with its own code, the model closed either way."""
    from ..api import Classifier  # lazy: keeps --help fast (torch, the backend)
    from ..serve.app import serve as serve_forever  # lazy: keeps --help fast (starlette, uvicorn)

    clf = None
    try:
        if opts.get("system_prompt") is not None:
            opts["system_prompt"] = _text_or_file(opts["system_prompt"], "--system-prompt")
        if opts.get("layout") is None:  # the seed's prompt, so a seed client gets the seed's numbers
            opts["layout"] = SERVE_LAYOUT
        clf = Classifier(_resolve(served.name), backend, **opts, **engine)
        held = clf.held(questions)  # the -q questions checked as `run` checks them
        reader = type(held.readout).Request
        if reader is None:
            raise ConfigError(f"the {held.readout.name} readout is not served (it reads no request body)")
        layout = f" · prompt layout: {opts['layout']}{LAYOUT_NOTE[opts['layout']]}"  # named on the start-up line
        code = serve_forever(held, reader.held(held.readout, held.cfg), limits, host, port, served, stop,
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
