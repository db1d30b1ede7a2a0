"""A time limit on a request's headers (`header_deadline`): a connection that has not sent a whole request head
within `--header-timeout` seconds of opening (or of its last answer, kept alive) gets a 408 and is closed.

uvicorn bounds an idle keep-alive connection (`timeout_keep_alive`) and nothing else: a client that sends half
a head, or one byte now and then, holds its socket for ever (a hostile trial left 1,100 sockets open after
60 s, issue 48), and the first byte of a head even cancels the keep-alive limit. The body has its own limit
in the app (`--body-timeout`, routes.py), which an ASGI app can keep because it sees the body arrive; it never
sees a connection before its head is whole, so this limit lives in the protocol: uvicorn's h11 protocol (h11
is uvicorn's own dependency; the server names it rather than taking httptools where that is installed), with a
timer per connection.
"""

from __future__ import annotations

import json
from typing import Any


def response_408(seconds: float) -> bytes:
    """The whole answer to a head not sent in time, in the API's error shape; the connection closes after it."""
    body = json.dumps({"error": {"status": 408, "field": None,
                                 "message": f"headers: not sent within {seconds:g} s"}}).encode()  # fmt: skip
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def header_deadline(seconds: float) -> type:
    """uvicorn's h11 protocol with a limit of `seconds` on each request head (pass it as `Config(http=…)`)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # lazy: uvicorn is the server's alone

    late = response_408(seconds)

    class HeaderDeadline(H11Protocol):
        _head_timer: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._head_in():
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # kept alive: the next head has the same limit (a pipelined one may already be in)
            if not self.transport.is_closing() and not self._head_in():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _head_in(self) -> bool:
            """A request's head is whole and its answer not yet sent (the app holds it now)."""
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(seconds, self._too_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _too_late(self) -> None:
            self._head_timer = None
            if self._head_in() or self.transport.is_closing():
                return
            self.transport.write(late)
            self.transport.close()

    return HeaderDeadline
