"""The HTTP side: a Starlette app on uvicorn (its endpoints: routes.py: the seed's API, seed.py, and the
product's own record route), run in a thread of its own while the main thread runs the engine (service.py),
and the server's fate.

Starlette rather than FastAPI: the body is read and parsed by the product's own rules (request.py) and the
seed's schema (seed.py, whose validation errors read as FastAPI's), so FastAPI's layer would run for nothing.
SIGTERM (and Ctrl-C) drains: uvicorn stops accepting, the requests in flight are answered, then the process
exits 143 (130; SIGHUP: 129). A request head not whole within --header-timeout is answered 408 and its
connection closed (headers.py). An engine that dies answers what waits with 503 and ends the server with exit 4
and one line (`error: …`), so an orchestrator restarts it.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..backends import NAMES as BACKEND_NAMES
from ..errors import BackendError, ConfigError
from ..readouts.base import RequestReader
from . import seed
from .auth import BearerKey
from .headers import header_deadline
from .limits import Limits
from .routes import Endpoints, Facts
from .service import Service

EXIT_TERMINATED, EXIT_INTERRUPTED, EXIT_HANGUP = 143, 130, 129
SIGNAL_NAMES = {EXIT_TERMINATED: "SIGTERM", EXIT_INTERRUPTED: "SIGINT", EXIT_HANGUP: "SIGHUP"}


class Stop:
    """SIGTERM / SIGINT / SIGHUP: recorded, and the HTTP server told to stop accepting (installed before the
    model loads, so a signal during start-up is kept too). Exit 143 / 130 / 129 once the requests in flight are
    answered. SIGHUP (a closed terminal, an ssh session that ended) drains too: its default action dropped the
    requests in flight with no answer and no line (issue 48); not under `nohup`, which asked for it ignored."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.server: Any = None

    def install(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._handler)
        if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:
            signal.signal(signal.SIGHUP, self._handler)

    def _handler(self, signum: int, frame) -> None:
        self.signum = self.signum or signum
        if self.server is not None:
            self.server.should_exit = True

    @property
    def code(self) -> int | None:
        if self.signum is None:
            return None
        codes = {int(signal.SIGTERM): EXIT_TERMINATED, int(signal.SIGHUP): EXIT_HANGUP}
        return codes.get(self.signum, EXIT_INTERRUPTED)


@dataclass(frozen=True)
class Served:
    """How the server names itself and what it lets in: `name` the `-m` name, `served` the model id it lists
    (`--served-model-name`; default `name`), `api_key` the bearer key (None: none asked), `t0` the
    time.monotonic() of the command's start (`/health`'s startup_seconds)."""

    name: str
    served: str
    api_key: str | None = None
    t0: float = 0.0
    image_urls: bool = False  # --allow-image-urls (serve/image_urls.py says why it is opt-in)


def make_app(service: Service, limits: Limits, facts: Facts, draining: Callable[[], bool],
             api_key: str | None = None) -> Any:  # fmt: skip
    """The ASGI app over `service` (its endpoints: routes.py), behind the bearer key when one is set."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException

    from .response import json_response  # lazy: loads starlette, which serve alone needs

    async def http_error(request: Any, exc: Exception) -> Any:
        """Starlette's own refusals (an unknown path 404, a wrong method 405) as the seed's server words them
        (FastAPI's `{"detail": "Not Found"}`), not Starlette's plain text."""
        assert isinstance(exc, HTTPException)
        return json_response({"detail": exc.detail}, exc.status_code, dict(exc.headers or {}))

    app: Any = Starlette(routes=Endpoints(service, limits, facts, draining).routes(),
                         exception_handlers={HTTPException: http_error})  # fmt: skip
    return BearerKey(app, api_key) if api_key else app


def manifest(name: str, held: Any, reader: RequestReader) -> dict[str, Any]:
    """GET /v1/manifest: the model as named and as loaded, the manifest hashes a `run` output of this model and
    these settings carries, and the releases."""
    from ..checkpoint.weights import model_fingerprint  # lazy: reads the checkpoint's files

    cfg = held.cfg
    manifest = {"model content": model_fingerprint(cfg.model), "backend": cfg.backend, **cfg.resume_key(),
                **reader.describe()}  # fmt: skip
    entry = {"id": name, "object": "model", "owned_by": "openjev-batch", "path": str(cfg.model),
             "backend": cfg.backend, "manifest": manifest, "releases": releases()}  # fmt: skip
    return {"object": "list", "data": [entry]}


def facts(served: Served, held: Any, reader: RequestReader) -> Facts:
    """What the endpoints tell of this server (routes.Facts)."""
    names = tuple(dict.fromkeys((seed.ALIAS, served.served)))
    takes_images = bool(getattr(held.backend, "images", False))
    return Facts(names, tuple(dict.fromkeys((*names, served.name))), served.served,
                 manifest(served.name, held, reader), round(time.monotonic() - served.t0, 2),
                 reader.caps.get("max_images", 0) if takes_images else 0, served.image_urls)  # fmt: skip


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


def serve(held: Any, reader: RequestReader, limits: Limits, host: str, port: int, served: Served, stop: Stop,
          say: Callable[[str], None]) -> int:  # fmt: skip
    """Serve until stopped. Returns the exit code (143 / 130 after a drain). Raises BackendError when the
    engine dies, ConfigError when the address cannot be listened on."""
    import uvicorn

    service = Service(held, reader, limits)
    app = make_app(service, limits, facts(served, held, reader), lambda: stop.signum is not None, served.api_key)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=int(limits.timeout_s) + 5,
                            http=header_deadline(limits.header_timeout_s))  # fmt: skip
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
    say(f"serving {served.name} ({held.cfg.backend}) on http://{host}:{bound_port(server, port)}  "
        "POST /v1/systemone · POST /v1/records · GET /v1/models · GET /v1/limits · GET /health")  # fmt: skip
    try:
        service.serve_until(lambda: not http.is_alive())
    except BackendError:
        server.should_exit = True
        http.join(10)
        raise
    http.join()
    return stop.code or 0
