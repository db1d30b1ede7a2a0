"""`serve`: the systemone HTTP API over one engine and one readout held open (openjev_batch/serve/)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import ConfigError, OpenjevError
from ..serve.limits import Limits
from .app import EXIT_FAILED, _fail, app, err
from .job_options import ENGINE, READOUT, _engine_options, _readout_options, job_flag
from .options import BACKEND, _resolve, _text_or_file, apply_threads_option

_D = Limits()  # the limits' defaults, shown by --help


@app.command(short_help="Serve the systemone HTTP API from one engine held open.")
@_engine_options("run")
@_readout_options("serve")  # applied first: serve takes run's held-engine options, not its --questions
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
    readout_opts: dict = READOUT,  # run's system prompt, calibration and debias order (their Flag names serve)
    max_questions: int = typer.Option(
        _D.max_questions, "--max-questions", help="Most questions a request asks (422 past it)."
    ),
    max_options: int = typer.Option(
        _D.max_options, "--max-options", help="Most options a question has (422 past it)."
    ),
    max_body_bytes: int = typer.Option(
        _D.max_body_bytes, "--max-body-bytes", help="Largest request body (413 past it)."
    ),
    max_branch_tokens: int = typer.Option(
        _D.max_branch_tokens,
        "--max-branch-tokens",
        help="Most tokens a branch (prefix + one question) holds (422 past it).",
    ),
    max_request_tokens: int = typer.Option(
        _D.max_request_tokens,
        "--max-request-tokens",
        help="Most input tokens a request holds, prefix and every suffix (422 past it).",
    ),
    max_concurrent: int = typer.Option(
        _D.max_concurrent,
        "--max-concurrent",
        help="Most requests evaluated at once (529 with Retry-After past it).",
    ),
    timeout: float = typer.Option(
        _D.timeout_s, "--timeout", help="Seconds a request waits for the engine (504 past it)."
    ),
    batch_wait_ms: float = typer.Option(
        _D.batch_wait_ms,
        "--batch-wait-ms",
        help="How long an idle engine waits for more requests to join a batch.",
    ),
    max_batch: int = typer.Option(
        _D.max_batch, "--max-batch", help="Most requests in one engine batch (0: every request waiting)."
    ),
    max_branches: int = job_flag("max_branches", "run"),
    threads: int = job_flag("threads", "run"),
    engine: dict = ENGINE,
) -> None:
    """Serve the systemone API: POST /v1/systemone with one row (`id`, `state` or `messages`, `questions`) gets
    one answer per question, with the columns and numbers `run` writes for that row."""
    from ..api import Classifier  # lazy: keeps --help fast (torch, the backend)
    from ..serve.app import Stop  # lazy: keeps --help fast
    from ..serve.app import serve as serve_forever  # lazy: keeps --help fast (starlette, uvicorn)
    from ..serve.request import held_readouts  # lazy: keeps --help fast

    try:
        limits = Limits(max_questions, max_options, max_body_bytes, max_branch_tokens, max_request_tokens,
                        max_concurrent, timeout, batch_wait_ms, max_batch)  # fmt: skip
    except ValueError as e:
        _fail(ConfigError(f"invalid options: {e}"))
    stop = Stop()
    stop.install()  # before the model loads: a SIGTERM during start-up still ends the server with 143
    apply_threads_option(threads)
    clf = None
    try:
        opts = dict(readout_opts)
        if opts.get("system_prompt") is not None:
            opts["system_prompt"] = _text_or_file(opts["system_prompt"], "--system-prompt")
        clf = Classifier(_resolve(model), backend, max_branches=max_branches, **opts, **engine)
        cfg, readouts = held_readouts(clf, questions)  # the -q questions checked as `run` checks them
        code = serve_forever(clf, cfg, readouts, limits, host, port, model, stop,
                             lambda s: err.print(s, markup=False, highlight=False))  # fmt: skip
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
    clf.close()
    if code:
        err.print(
            f"stopped ({'SIGTERM' if code == 143 else 'SIGINT'}): the requests in flight were answered",
            markup=False,
        )
    raise typer.Exit(code)
