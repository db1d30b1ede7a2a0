"""`--connect URL`: the sglang backend driving an sglang server that is already running (`python -m
sglang.launch_server`), over its HTTP API, instead of starting `sglang.Engine` in this process.

`RemoteEngine` answers the part of `sglang.Engine` the request patterns use (`generate`, `async_generate`,
`loop`, `get_server_info`, `flush_cache`, `shutdown`) with the server's `/generate`, `/server_info` and
`/flush_cache`, so the patterns, the request they send (requests.request: prefill only, `token_ids_logprob` on
every request, sgl-project/sglang#34719), the label readback by token id and the readout are the in-process
engine's, unchanged. `connect(backend, opts)` starts an `SGLangBackend` on it: the tokenizer is `-m`'s (the
server is started with `--skip-tokenizer-init` or not: ids go in, no text comes back), the facts (KV pool,
request input limit, state slots) are read from the server.

Not over HTTP: multi-item scoring (its requests carry sglang's own request objects; a server started with
`--enable-mis` is refused), images (their processor output is tensors), the product's scheduler workarounds
(the server runs its own scheduler: answers are the same, `--sglang-patches` has no effect there).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...checkpoint.info import model_info
from ...errors import BackendError
from ..base import load_tokenizer
from .kwargs import _version_tuple

TIMEOUT_S = 3600.0  # one request batch may hold a window's thousands of branches
# a server that takes the connection and never answers hung `--connect` for the hour above at start (hostile
# trial): its facts come within this or the job ends there
INFO_TIMEOUT_S = 30.0


class RemoteEngine:
    """The subset of `sglang.Engine` the backend calls, over a running server's HTTP API at `url`."""

    def __init__(self, url: str):
        import httpx  # lazy: only --connect needs an HTTP client

        self.url = url.rstrip("/")
        self.loop = asyncio.new_event_loop()
        self._sync = httpx.Client(base_url=self.url, timeout=TIMEOUT_S)
        self._async: Any = None  # made inside `loop` on first use (an httpx.AsyncClient binds to its loop)

    def _answer(self, r) -> Any:
        if r.status_code != 200:  # the body in one line, cut short: a web server's 404 page was 12 lines of HTML
            said = " ".join(r.text.split())
            said = said if len(said) <= 200 else said[:200] + "…"
            raise RuntimeError(f"{self.url}{r.request.url.path} answered {r.status_code}: {said}")
        return r.json()

    def get_server_info(self) -> dict[str, Any]:
        r = self._sync.get("/server_info", timeout=INFO_TIMEOUT_S)
        if r.status_code == 404:  # sglang before /server_info
            r = self._sync.get("/get_server_info", timeout=INFO_TIMEOUT_S)
        info = self._answer(r)
        if not isinstance(info, dict):  # valid JSON, not sglang's: `[]` ended in an AttributeError traceback
            raise RuntimeError(f"{self.url}{r.request.url.path} answered {type(info).__name__}, not an object")
        return info

    def generate(self, **kw: Any) -> Any:
        return self._answer(self._sync.post("/generate", json=kw))

    async def async_generate(self, **kw: Any) -> Any:
        if self._async is None:
            import httpx  # lazy: only --connect needs an HTTP client

            self._async = httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT_S,
                                            limits=httpx.Limits(max_connections=64))  # fmt: skip
        return self._answer(await self._async.post("/generate", json=kw))

    def flush_cache(self) -> None:
        self._answer(self._sync.post("/flush_cache"))

    def shutdown(self) -> None:
        """Close the connections; the server keeps running (it is not ours to stop)."""
        if self._async is not None and not self.loop.is_closed():
            self.loop.run_until_complete(self._async.aclose())
        self._sync.close()
        self.loop.close()


def connect(backend: Any, opts: Any) -> None:
    """Start `backend` (an SGLangBackend, its __init__ handing over) on the server at `opts.sglang.connect`.
    Raises BackendError when the server cannot be reached or runs multi-item scoring."""
    url = opts.sglang.connect
    t = time.perf_counter()
    backend.model_info = model_info(opts.model)
    backend.tokenizer = load_tokenizer(opts.model, opts.trust_remote_code)
    backend.engine, backend._error_file = None, None
    try:
        engine = RemoteEngine(url)
        info = engine.get_server_info()
    except Exception as e:  # noqa: BLE001 - any failure to reach it is one message
        raise BackendError(
            f"--connect {url}: cannot reach an sglang server there: {type(e).__name__}: {e}"
        ) from None
    backend.engine = engine
    if info.get("enable_mis") or info.get("enable_multi_item_scoring"):
        backend.close()
        raise BackendError(f"--connect {url}: the server runs multi-item scoring, which --connect cannot drive "
                           "(its requests are sglang's own objects); start it without --enable-mis")  # fmt: skip
    backend.multi_item_off_reason = "off: --connect drives a running server"
    backend.fork = False
    backend.batch_memory = {}
    backend.moe_config_dir = None
    release = str(info.get("version") or "0.5.17")
    backend.max_new_tokens = 0 if _version_tuple(release) >= (0, 5, 17) else 1
    backend.images, backend.no_images = None, "--connect sends no images (their processor output is tensors)"
    backend._read_engine(info, {})  # the KV pool, the request input limit, a hybrid's state slots
    backend._pattern_words = backend._describe_pattern()
    backend.job_tokens = [0, 0]
    backend.start_s = round(time.perf_counter() - t, 1)
    backend.warmup_s = 0.0
    served = info.get("model_path") or "?"
    backend.startup = f"connected to {url} (sglang {release}, serving {served}) in {backend.start_s:.1f} s"
