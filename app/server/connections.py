"""Open connections, bounded: uvicorn's HTTP/1.1 protocol (h11) with a header deadline and a cap.

uvicorn closes an idle connection between requests (`timeout_keep_alive`) but not a new one that
never sends a request, nor one that sends its headers a byte at a time (any data cancels that
timer), and its `limit_concurrency` answers past the limit with a plain-text 503 while the sockets
that hold it stay open. Here every connection must send a request's headers within
HEADER_TIMEOUT_S of opening (or of its last response ending), and past MAX_CONNECTIONS a new
connection closes the oldest one that is not in a request: a flood of half-open sockets only
pushes out its own, and a real client that sends its request gets served. Only when every
connection holds a request does a new one get a 503 (a JSON error) and close.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import h11
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.server.errors import ApiError

log = logging.getLogger("chinwag.server")


class Connections:
    """One server's open connections, oldest first."""

    def __init__(self, limit: int, header_timeout: float) -> None:
        self.limit = limit
        self.header_timeout = header_timeout
        self.open: dict[GuardedH11, None] = {}  # insertion order: the oldest first
        self.closed_idle = 0  # connections closed for not sending a request in time, or to make room
        self.refused = 0  # requests answered 503 because every connection held one

    def make_room(self, newcomer: "GuardedH11") -> bool:
        """Past the limit, close the oldest connection without a request (not `newcomer`); False if none."""
        if len(self.open) <= self.limit:
            return True
        for conn in self.open:
            if conn is not newcomer and not conn.in_request:
                conn.close_idle("to make room for a new connection")
                return True
        return False


def protocol_class(connections: Connections) -> type[H11Protocol]:
    """uvicorn's h11 protocol bound to one server's `connections` (uvicorn takes a class)."""
    return type("Guarded", (GuardedH11,), {"pool": connections})


class GuardedH11(H11Protocol):
    pool: Connections  # set by protocol_class (uvicorn has its own `connections`)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._app = self.app

    @property
    def in_request(self) -> bool:
        """A request's headers have come and its response has not ended."""
        return self.cycle is not None and not self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.pool.open[self] = None
        self.pool.make_room(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.open.pop(self, None)
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        before = self.cycle
        # A request that comes when every connection holds one gets the 503 app.
        full = len(self.pool.open) > self.pool.limit and not self.pool.make_room(self)
        self.app = self._busy if full else self._app
        super().handle_events()
        if self.cycle is not before:  # a request's headers came
            self._disarm()
            if full:
                self.pool.refused += 1
                log.warning("503: every one of %d connections holds a request", self.pool.limit)

    async def _busy(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app of a request that came when every connection held one."""
        error = ApiError(503, f"all {self.pool.limit} connections the server takes are in use; try again shortly")
        response = error.response(scope["path"])
        response.headers["connection"] = "close"
        await response(scope, receive, send)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.in_request:  # the next request's headers are due
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.pool.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.in_request:
            self.close_idle(f"no request within {self.pool.header_timeout:g} s")

    def close_idle(self, why: str) -> None:
        """Close a connection that is not in a request (half-open, slow headers, or idle)."""
        self.pool.open.pop(self, None)
        self.pool.closed_idle += 1
        self._disarm()
        if self.transport.is_closing():
            return
        log.debug("closing a connection from %s: %s", self.client, why)
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:  # mid-way through a request's headers: just close
            pass
        self.transport.close()


ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's words (selector_events)
ACCEPT_RETRY = "_start_serving"  # asyncio's retry of accept(); run once the socket is closed, it raises
ACCEPT_REPORT_S = 10.0  # at most one line this often while accept() keeps failing


class QuietAcceptErrors:
    """The loop's exception handler once a server listens on it. Out of file descriptors, asyncio
    reports every accept() that fails with its traceback, and schedules a retry for each (CPython's
    selector loop goes on through its whole backlog): hundreds a second, megabytes of log, and each
    retry still pending when the socket closes raises again. Here one line every ACCEPT_REPORT_S with
    how many were left out; everything else goes to the handler there was before."""

    def __init__(self, previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None) -> None:
        self.previous = previous
        self.said, self.left_out = -ACCEPT_REPORT_S, 0

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop) -> None:
        """Put it on `loop` for good (a server started again finds it there)."""
        if not isinstance(loop.get_exception_handler(), cls):
            loop.set_exception_handler(cls(loop.get_exception_handler()))

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message != ACCEPT_FAILED and not (message.startswith("Exception in callback") and ACCEPT_RETRY in message):
            if self.previous is not None:
                self.previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = loop.time()
        if now - self.said < ACCEPT_REPORT_S or message != ACCEPT_FAILED:
            self.left_out += 1
            return
        more = f" ({self.left_out} more since the last line)" if self.left_out else ""
        log.warning("cannot accept a connection: %s%s", context.get("exception"), more)
        self.said, self.left_out = now, 0
