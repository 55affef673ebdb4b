"""What both wires (OpenAI's routes in api.py, Anthropic's in anthropic.py) do the same way:
how the server runs (ServerConfig), who the client is, its key, its turn in the queue, a client that goes away, a stream that always closes."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.server.service import Started

log = logging.getLogger("chinwag.server")
T = TypeVar("T")
PIN_HEADER = "x-chinwag-conversation"  # names the conversation a request continues (as OpenAI's `user`)


@dataclass(frozen=True)
class ServerConfig:
    """How `chinwag serve` (or the window) runs the server."""

    host: str = "127.0.0.1"
    port: int = 8080
    model: str = ""
    api_key: str = ""
    allow_switch: bool = False
    cors_origins: tuple[str, ...] = field(default_factory=tuple)  # pages allowed in (403 for others)
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)  # Host names besides its own (421 for others)


class ClientGone(Exception):
    """The client closed its connection before its response was ready (its turn was stopped)."""


def client_of(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "?"


class ClosingStream(StreamingResponse):
    """A stream whose body is always closed when the response ends, a client disconnect included:
    closing it stops the engine's turn and frees the queue at once, not when it is garbage-collected."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


async def _disconnected(request: Request) -> None:
    """Returns once the client has closed its connection (the request's body has been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; if the client goes away first, `work` is cancelled (which stops its turn) and
    ClientGone is raised. uvicorn wakes the watcher as the connection closes, so this takes no polling."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if not watcher.cancelled() and watcher.done():
                raise ClientGone()
    return task.result()


async def first(items: AsyncGenerator[object, None]) -> Started:
    """Wait for the request's turn: the generation's first item. An ApiError (bad model, context
    overflow) is raised here, before any response is sent; the generation is closed on any error."""
    try:
        started = await anext(items)
    except BaseException:
        await items.aclose()
        raise
    assert isinstance(started, Started)
    return started
