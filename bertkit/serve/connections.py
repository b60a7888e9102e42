"""`bertkit serve`'s connections: how many may be open, how long a request may take to arrive, and SIGTERM.

    new connection --Guard.admit--> at most --max-connections open: the oldest idle one is closed to make room,
        else the new one gets a 503 at once (what it sends is never read)
    request's first byte --header_timeout--> headers complete (else 408 and closed; a connection that sent
        nothing is just closed) --body_timeout + 1 s--> body complete (the route answers 408 itself at
        body_timeout; this closes a connection whose route did not read its body)
    SIGTERM --GuardedHttp.shutdown--> unfinished headers closed, a body still coming wakes its route (503),
        requests read whole are answered

GuardedHttp is uvicorn's HTTP/1.1 protocol (httptools) with these rules; app.py hands it to
uvicorn.Config(http=...). Guard is what every connection's protocol shares.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .settings import ServeConfig

if TYPE_CHECKING:
    from .metrics import PrometheusSeries

STATUS_PHRASES = {408: "Request Timeout", 503: "Service Unavailable"}


def raw_error(status: int, kind: str, message: str) -> bytes:
    """A JSON error {"error", "type"} as bytes on the wire, for the protocol to send where no app runs; the
    connection closes after it."""
    body = json.dumps({"error": message, "type": kind}, ensure_ascii=False).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {STATUS_PHRASES[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class Guard:
    """What the protocol of every connection shares: the open connections, oldest first, and the limits."""

    def __init__(self, settings: ServeConfig, metrics: PrometheusSeries) -> None:
        self.settings, self.metrics = settings, metrics
        self.open: dict[GuardedHttp, None] = {}  # insertion order: oldest first
        self.stopping = False  # SIGTERM: uvicorn is shutting the connections down

    def admit(self, connection: GuardedHttp) -> bool:
        """Count a new connection in; at the cap, close the oldest idle one for it (False: none is idle)."""
        if len(self.open) >= self.settings.max_connections:
            idle = next((c for c in self.open if c.idle()), None)
            if idle is None:
                self.metrics.closed.labels("refused").inc()
                return False
            self.forget(idle)
            idle.transport.close()
            self.metrics.closed.labels("reclaimed").inc()
        self.open[connection] = None
        self.metrics.connections.set(len(self.open))
        return True

    def forget(self, connection: GuardedHttp) -> None:
        self.open.pop(connection, None)
        self.metrics.connections.set(len(self.open))


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools), with what a server facing careless or hostile clients needs:
    at most --max-connections open, a request's headers within --header-timeout (from connecting, or from a
    kept-alive request's first byte), its body within --body-timeout (the app answers 408 itself; this closes
    a connection whose route did not read its body a second later), and on SIGTERM reads under way ended at
    once (uvicorn would wait 30 s for them, then answer a text/plain 500).

    uvicorn builds one per connection: Config(http=functools.partial(GuardedHttp, guard))."""

    def __init__(self, guard: Guard, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.guard = guard
        self.timer: asyncio.TimerHandle | None = None
        self.reading_headers = False  # a request's first bytes came, its headers are not complete
        self.refused = False

    def idle(self) -> bool:
        """No request under way: nothing of one received yet, or every answer sent."""
        return not self.reading_headers and (self.cycle is None or self.cycle.response_complete) and not self.pipeline

    # a stream's Transport, as uvicorn's HttpToolsProtocol narrows asyncio's BaseTransport (ignoring it the same way)
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            self.refused = True  # answered at once; what the client sends is never read
            transport.write(
                raw_error(
                    503,
                    "too_many_connections",
                    f"{self.guard.settings.max_connections} "
                    "connections are open with requests under way (--max-connections); retry "
                    "shortly",
                )
            )
            transport.close()
            return
        self.arm(self.guard.settings.header_timeout, self.headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        self.guard.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_headers = True
        if self.timer is None:  # a kept-alive connection's next request (the first one's clock runs since connect)
            self.arm(self.guard.settings.header_timeout, self.headers_late)

    def on_headers_complete(self) -> None:
        self.reading_headers = False
        self.arm(self.guard.settings.body_timeout + 1, self.body_late)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.disarm()
        super().on_message_complete()

    def shutdown(self) -> None:
        """SIGTERM: idle connections and unfinished headers are closed (uvicorn's own rule); a body still coming
        wakes its route, which answers 503 (Guard.stopping); requests read whole are answered, then closed."""
        self.guard.stopping = True
        if self.cycle is not None and self.cycle.more_body and not self.cycle.response_started:
            self.cycle.message_event.set()
        super().shutdown()

    def arm(self, seconds: float, then: Callable[[], None]) -> None:
        self.disarm()
        self.timer = self.loop.call_later(seconds, then)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def headers_late(self) -> None:
        self.timer = None
        self.guard.metrics.closed.labels("header_timeout").inc()
        if self.reading_headers:  # part of a request came: say why it is closed (an idle connection just is)
            seconds = self.guard.settings.header_timeout
            self.transport.write(
                raw_error(
                    408, "timeout", f"the request's headers did not arrive within {seconds:g} s (--header-timeout)"
                )
            )
        self.transport.close()

    def body_late(self) -> None:
        self.timer = None
        self.guard.metrics.closed.labels("body_timeout").inc()
        self.transport.close()
