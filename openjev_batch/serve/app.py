"""The HTTP side: a Starlette app on uvicorn (its endpoints: routes.py), run in a thread of its own while the main
thread runs the engine (service.py), and the server's fate.

    POST /v1/systemone   one row (`id`, `state` or `messages`, `questions`) → one answer per question, with
                         the columns and numbers `run` writes for that row; `usage`; the headers
                         x-openjev-prefix-tokens, x-openjev-cached-tokens and Server-Timing
    GET  /health         200 while the engine serves, 503 once it has stopped or the server drains
    GET  /v1/models      the model, its manifest hashes (the `--resume` key's: model content, engine
                         settings, questions, system prompt, calibration) and the releases (sglang's)

Starlette rather than FastAPI: the body is read and parsed by the product's own rules (request.py), so
FastAPI's validation layer would run for nothing. SIGTERM (and Ctrl-C) drains: uvicorn stops accepting, the
requests in flight are answered, then the process exits 143 (130). An engine that dies answers what waits
with 503 and ends the server with exit 4 and one line (`error: …`), so an orchestrator restarts it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..backends import NAMES as BACKEND_NAMES
from ..errors import BackendError, ConfigError
from .limits import HTTPError, Limits
from .request import Readouts
from .routes import Endpoints
from .service import Service

if TYPE_CHECKING:
    from ..config import RunConfig

EXIT_TERMINATED, EXIT_INTERRUPTED = 143, 130


class Stop:
    """SIGTERM / SIGINT: recorded, and the HTTP server told to stop accepting (installed before the model
    loads, so a signal during start-up is kept too). Exit 143 / 130 once the requests in flight are answered."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.server: Any = None

    def install(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._handler)

    def _handler(self, signum: int, frame) -> None:
        self.signum = self.signum or signum
        if self.server is not None:
            self.server.should_exit = True

    @property
    def code(self) -> int | None:
        if self.signum is None:
            return None
        return EXIT_TERMINATED if self.signum == signal.SIGTERM else EXIT_INTERRUPTED


def make_app(
    service: Service, readouts: Readouts, limits: Limits, models: dict[str, Any], draining: Callable[[], bool]
):
    """The ASGI app over `service` (its endpoints: routes.py)."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException

    from .response import error_response  # lazy: loads starlette, which serve alone needs

    async def http_error(request: Any, exc: Exception) -> Any:
        """Starlette's own refusals (an unknown path 404, a wrong method 405) in the API's one error shape, not
        its plain-text "Not Found"."""
        assert isinstance(exc, HTTPException)
        why = f"{request.method} {request.url.path}: {exc.detail}"
        return error_response(HTTPError(exc.status_code, why, headers=dict(exc.headers or {})))

    return Starlette(routes=Endpoints(service, readouts, limits, models, draining).routes(),
                     exception_handlers={HTTPException: http_error})  # fmt: skip


def models_info(name: str, clf: Any, cfg: RunConfig, readout: Any) -> dict[str, Any]:
    """GET /v1/models: the model as named and as loaded, the manifest hashes a `run` output of this model and
    these settings carries, and the releases."""
    from ..checkpoint.weights import model_fingerprint  # lazy: reads the checkpoint's files

    manifest = {"model content": model_fingerprint(cfg.model), "backend": cfg.backend, **cfg.resume_key(),
                **readout.manifest()}  # fmt: skip
    entry = {"id": name, "object": "model", "owned_by": "openjev-batch", "path": str(clf.model),
             "backend": clf.backend_name, "manifest": manifest, "releases": releases()}  # fmt: skip
    return {"object": "list", "data": [entry]}


def releases() -> dict[str, str]:
    """openjev-batch's release and that of each backend's package installed here (the engine's: sglang's)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"openjev-batch": __version__}
    for name in BACKEND_NAMES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:  # hf runs on transformers, named in the manifest's model content
            pass
    return out


class StartupLog(logging.Filter):
    """uvicorn's own log lines before the server listens (a bind failure: "[Errno 98] error while attempting to
    bind on address …: address already in use"): kept for the product's one `error:` line, not printed beside
    it as a second line in uvicorn's format. Lines after the start pass."""

    def __init__(self, server: Any) -> None:
        super().__init__()
        self.server = server
        self.lines: list[str] = []
        self.logger = logging.getLogger("uvicorn.error")  # uvicorn's server logs there
        self.logger.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.server.started:
            return True
        self.lines.append(" ".join(record.getMessage().split()))
        return False

    def remove(self) -> None:
        self.logger.removeFilter(self)


def bound_port(server: Any, asked: int) -> int:
    """The port `server` (a started uvicorn.Server) listens on: `--port 0` asks the system for a free one, which
    the start-up line must name, or a client cannot find the server."""
    for srv in getattr(server, "servers", None) or ():
        for sock in srv.sockets:
            return int(sock.getsockname()[1])
    return asked


def serve(clf: Any, cfg: RunConfig, readouts: Readouts, limits: Limits, host: str, port: int, name: str,
          stop: Stop, say: Callable[[str], None]) -> int:  # fmt: skip
    """Serve until stopped. Returns the exit code (143 / 130 after a drain). Raises BackendError when the
    engine dies, ConfigError when the address cannot be listened on."""
    import uvicorn

    service = Service(clf, readouts.own, cfg, limits)
    app = make_app(service, readouts, limits, models_info(name, clf, cfg, readouts.shared or readouts.own),
                   lambda: stop.signum is not None)  # fmt: skip
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=int(limits.timeout_s) + 5)  # fmt: skip
    server = uvicorn.Server(config)
    stop.server = server
    if stop.signum is not None:  # stopped while the model loaded
        return stop.code or EXIT_TERMINATED
    http = threading.Thread(target=server.run, name="openjev-serve-http", daemon=True)
    service.start()
    startup = StartupLog(server)
    http.start()
    while not server.started and http.is_alive():
        time.sleep(0.02)
    startup.remove()
    if not server.started:
        why = startup.lines[-1] if startup.lines else "in use, or not an address of this machine?"
        raise ConfigError(f"cannot listen on {host}:{port}: {why}")
    say(f"serving {name} ({clf.backend_name}) on http://{host}:{bound_port(server, port)}  "
        "POST /v1/systemone · GET /health · GET /v1/models")  # fmt: skip
    try:
        service.serve_until(lambda: not http.is_alive())
    except BackendError:
        server.should_exit = True
        http.join(10)
        raise
    http.join()
    return stop.code or 0
