"""`--connect URL`: the sglang backend driving an sglang server that is already running (`python -m
sglang.launch_server`), over its HTTP API, instead of starting `sglang.Engine` in this process.

`RemoteEngine` answers the part of `sglang.Engine` the request patterns use (`generate`, `async_generate`,
`loop`, `get_server_info`, `flush_cache`, `shutdown`) with the server's `/generate`, `/server_info` and
`/flush_cache`, so `SGLangBackend(opts, engine=RemoteEngine(...))` sends the in-process engine's requests
(requests.request: prefill only, `token_ids_logprob` on every request, sgl-project/sglang#34719) and reads the
labels back by token id, unchanged. `connect(url, deadline_s)` makes one and waits until the server is ready
(datatrove's RemoteInferenceServer: one request path, a local or a remote server behind it).

Every request has a total deadline (`--connect-timeout`, by default the seed's 120-s backend timeout): httpx's
read timeout restarts on every byte, so a server trickling a body would hold a request for ever. A request
that failed in the network (refused, reset) is tried again (tenacity, as lm-eval does) within the same
deadline. A deadline passed, a network that stays down or an answer that is not sglang's (not JSON, not an
object) is the job's error, naming the URL: every later call fails at once with it, so the pipeline's
liveness check ends the job instead of writing each row as an error (issue 48).

Not over HTTP: multi-item scoring (its requests carry sglang's own request objects; a server started with
`--enable-mis` is refused), images (their processor output is tensors), the product's scheduler workarounds
(the server runs its own scheduler: answers are the same, `--sglang-patches` has no effect there).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Coroutine
from typing import Any

from ...errors import BackendError

# a server that takes the connection and never answers hung `--connect` for an hour at start (hostile
# trial): its facts (and each readiness poll) come within this or the job ends there
INFO_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 64  # requests in flight; one waiting for a connection has not started its deadline
TRIES = 3  # a request refused or reset by the network: tried again twice, 0.5 then 1 s apart
MULTI_ITEM_OFF = "off: --connect drives a running server"  # `--dry-run` and the started backend say the same


class _Starting(Exception):
    """The server answered 503: it is loading its model (sglang's /health) or overloaded; worth a retry."""


class RemoteEngine:
    """The subset of `sglang.Engine` the backend calls, over a running server's HTTP API at `url`; each call
    ends within `deadline_s` (wall clock, retries included) or raises BackendError naming the URL."""

    def __init__(self, url: str, deadline_s: float = 120.0):
        try:  # core dependencies, imported here: only --connect needs them
            import httpx  # noqa: F401
            import tenacity  # noqa: F401
        except ImportError as e:  # a plain install once lacked httpx, and the message blamed the server
            raise BackendError(f"--connect needs the Python package {e.name}, a dependency of openjev-batch: "
                               f"pip install {e.name}") from None  # fmt: skip
        self.url = url.rstrip("/")
        self.deadline_s = deadline_s
        self.info_s = min(INFO_TIMEOUT_S, deadline_s)  # a facts request: 30 s, or less under a shorter deadline
        self.loop = asyncio.new_event_loop()
        self.fault: BackendError | None = None  # the job's error once the server broke a deadline or its shape
        self._client: Any = None  # made inside `loop` on first use (an httpx.AsyncClient binds to its loop)
        self._slots: asyncio.Semaphore | None = None

    # -- the part of sglang.Engine the backend uses -------------------------------------------------------

    def get_server_info(self) -> dict[str, Any]:
        return self._run(self._server_info())

    def generate(self, **kw: Any) -> Any:
        return self._run(self.async_generate(**kw))

    async def async_generate(self, **kw: Any) -> Any:
        return _generated(self, await self._call("POST", "/generate", kw, self.deadline_s))

    def flush_cache(self) -> None:
        self._run(self._call("POST", "/flush_cache", None, self.deadline_s, parse=False))

    def shutdown(self) -> None:
        """Close the connections; the server keeps running (it is not ours to stop)."""
        if self._client is not None and not self.loop.is_closed():
            self.loop.run_until_complete(self._client.aclose())
        self.loop.close()

    # -- readiness ----------------------------------------------------------------------------------------

    def wait_until_ready(self) -> None:
        """Poll `/health` until the server answers 200. 503 (sglang loading its model) is waited on up to
        `deadline_s`; a refused connection is tried `TRIES` times (a server binding its port, not a wrong URL
        waited on for minutes); a poll with no answer within INFO_TIMEOUT_S (or what is left of `deadline_s`,
        when that is less: `--connect-timeout 5` waits 5 s, not 30), or any other answer, fails."""
        self._run(self._ready())

    async def _ready(self) -> None:
        end = time.monotonic() + self.deadline_s
        while True:
            try:
                left = round(max(end - time.monotonic(), 0.5), 1)
                await self._call("GET", "/health", None, min(INFO_TIMEOUT_S, left), parse=False)
                return
            except _Starting:
                if time.monotonic() + 1.0 > end:
                    raise self._fail(f"/health answered 503 (starting) for {self.deadline_s:g} s") from None
                await asyncio.sleep(1.0)

    async def _server_info(self) -> dict[str, Any]:
        try:
            info = await self._call("GET", "/server_info", None, self.info_s, missing_ok=True)
        except _Missing:  # sglang before /server_info
            info = await self._call("GET", "/get_server_info", None, self.info_s)
        if not isinstance(info, dict):  # valid JSON, not sglang's: `[]` ended in an AttributeError traceback
            raise self._fail(f"/server_info answered {_shown(info)}, not sglang's object")
        return info

    # -- one request --------------------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    async def _call(self, method: str, path: str, body: Any, deadline_s: float, parse: bool = True,
                    missing_ok: bool = False) -> Any:  # fmt: skip
        """One request, tried again on a network failure, all within `deadline_s` of wall clock once it holds a
        connection. Returns the parsed JSON answer (`parse`). Raises BackendError (the job's error: `fault`),
        RuntimeError for an HTTP error status (that request's error: sglang's 400 for a bad request), _Missing
        for a 404 when `missing_ok`, _Starting for a 503."""
        if self.fault is not None:
            raise self.fault
        if self._client is None:
            import httpx  # lazy: only --connect needs an HTTP client

            # httpx's own timeouts restart on every byte; the wall-clock deadline is `wait_for`'s below
            self._client = httpx.AsyncClient(base_url=self.url, timeout=None,
                                             limits=httpx.Limits(max_connections=MAX_CONNECTIONS))  # fmt: skip
            self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        assert self._slots is not None
        async with self._slots:
            try:
                r = await asyncio.wait_for(self._tried(method, path, body), deadline_s)
            except asyncio.TimeoutError:
                raise self._fail(f"{path} did not finish within {deadline_s:g} s{_raise_it(deadline_s)}") from None
            except _NetworkDown as e:
                raise self._fail(f"{path}: {e}") from None
        return self._answer(r, path, parse, missing_ok)

    async def _tried(self, method: str, path: str, body: Any) -> Any:
        import httpx
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        retrying = AsyncRetrying(stop=stop_after_attempt(TRIES), wait=wait_exponential(multiplier=0.5, max=4),
                                 retry=retry_if_exception_type((httpx.TransportError, _Starting)), reraise=True)  # fmt: skip
        try:
            async for attempt in retrying:
                with attempt:
                    r = await self._client.request(method, path, json=body)
                    if r.status_code == 503 and path != "/health":  # overloaded: worth another try
                        raise _Starting()
            return r
        except _Starting:
            return r
        except httpx.TransportError as e:
            raise _NetworkDown(_network_words(e)) from None

    def _answer(self, r: Any, path: str, parse: bool, missing_ok: bool) -> Any:
        if r.status_code == 503 and path == "/health":
            raise _Starting()
        if r.status_code == 404 and missing_ok:
            raise _Missing()
        if r.status_code != 200:  # the body in one line, cut short: a web server's 404 page was 12 lines of HTML
            raise RuntimeError(f"{self.url}{path} answered {r.status_code}: {_cut(' '.join(r.text.split()))}")
        if not parse:
            return None
        try:
            return json.loads(r.content)
        except (ValueError, UnicodeDecodeError):  # a web page, a proxy's text: what came back, in one line
            raise self._fail(f"{path} answered text that is not JSON: {_cut(' '.join(r.text.split()))!r}") from None

    def _fail(self, what: str) -> BackendError:
        """The job's error, naming the URL; every later call raises it at once."""
        self.fault = BackendError(f"--connect {self.url}: {what}")
        return self.fault


class _Missing(Exception):
    """404 where an older sglang names the route differently."""


class _NetworkDown(Exception):
    """The network failed the request on every try."""


def _generated(engine: RemoteEngine, out: Any) -> Any:
    """`/generate`'s answer checked for sglang's shape (an object, or a list of them for a batch, each with
    an object `meta_info`): another shape is the job's error naming what came back (a bare `5` ended in
    `AttributeError: 'int' object has no attribute 'get'` on every row)."""
    outs = out if isinstance(out, list) else [out]
    if not outs or not all(isinstance(o, dict) and isinstance(o.get("meta_info", {}), dict) for o in outs):
        raise engine._fail(f"/generate answered {_shown(out)}, not sglang's answer")
    return out


def _shown(value: Any) -> str:
    """A JSON value in words and in part: `a list: [1, 2]`."""
    kind = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "true/false", type(None): "null"}.get(type(value), "a value")  # fmt: skip
    return f"{kind}: {_cut(json.dumps(value, ensure_ascii=False))}"


def _cut(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + "…"


def _raise_it(deadline_s: float) -> str:
    return "" if deadline_s == INFO_TIMEOUT_S else " (--connect-timeout raises this deadline)"


def _network_words(e: BaseException) -> str:
    """httpx's error in words, without Python's `[Errno 111]` or the exception's class name."""
    said = re.sub(r"\[Errno -?\d+\]\s*", "", str(e)).strip()
    return f"the network failed {TRIES} tries" + (f": {said}" if said else "")


def connect(url: str, deadline_s: float) -> RemoteEngine:
    """A RemoteEngine on the server at `url`, once it is ready. Raises BackendError when it cannot be reached,
    is not an sglang server, or runs multi-item scoring."""
    engine = RemoteEngine(url, deadline_s)
    try:
        engine.wait_until_ready()
        info = engine.get_server_info()
    except (BackendError, RuntimeError) as e:
        engine.shutdown()
        said = str(e).removeprefix(f"--connect {engine.url}: ")
        raise BackendError(f"--connect {url}: cannot reach an sglang server there: {said}") from None
    if info.get("enable_mis") or info.get("enable_multi_item_scoring"):
        engine.shutdown()
        raise BackendError(f"--connect {url}: the server runs multi-item scoring, which --connect cannot drive "
                           "(its requests are sglang's own objects); start it without --enable-mis")  # fmt: skip
    return engine
