"""The network thread: one asyncio loop of its own for every request, and the way events come back.

httpx runs on plain asyncio there, so no read ever happens on a front end's (Qt) loop; a
`Relay` hands what a request produces to the caller's loop, and the turn's `StopSignal`
(engine/backend.py) cancels the request from any thread. No MLX here.
"""

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from engine.backend import StopSignal
from engine.remote import errors

_network: asyncio.AbstractEventLoop | None = None
_network_lock = threading.Lock()
_DONE = object()


def network_loop() -> asyncio.AbstractEventLoop:
    """One event loop on its own thread for every request: httpx runs on plain asyncio, and no
    read ever happens on a front end's (Qt) loop."""
    global _network
    with _network_lock:
        if _network is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="chinwag-network", daemon=True).start()
            _network = loop
    return _network


class Relay:
    """Runs a coroutine on the network loop; what it `put`s comes out of `events` on the caller's loop.

    Create it on the caller's loop.
    """

    def __init__(self) -> None:
        self._caller = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self.task: concurrent.futures.Future | None = None

    def put(self, event: object) -> None:
        """From the network thread to the caller's loop."""
        try:
            self._caller.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the caller's loop has closed: nobody is listening
            pass

    def run(self, request: Coroutine[Any, Any, None], stop: StopSignal) -> concurrent.futures.Future:
        self.task = task = asyncio.run_coroutine_threadsafe(request, network_loop())
        task.add_done_callback(lambda _t: self.put(_DONE))
        stop.watch(task)
        return task

    async def events(self, stop: StopSignal) -> AsyncIterator:
        """What the request put, until it ends or `stop` is set (nothing after a stop, even if received)."""
        while True:
            event = await self._queue.get()
            if event is _DONE or stop.is_set():
                return
            yield event


async def post_lines(url: str, body: dict, headers: dict, on_line: Callable[[str], bool]) -> None:
    """POST `body` as JSON and hand each line of the reply to `on_line` until it returns True.

    A status other than 200 raises ServerError with the body; the end of the reply hands a
    last empty line, which ends an event left open. Runs on the network loop.
    """
    import httpx

    # Read at call time: one setting for the request and for describe_http_error's message.
    timeout = httpx.Timeout(errors.READ_TIMEOUT_S, connect=errors.CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
        async with client.stream("POST", url, json=body, headers=headers) as r:
            if r.status_code != 200:
                raise errors.ServerError(r.status_code, await r.aread())
            async for line in r.aiter_lines():
                if on_line(line):
                    return
            on_line("")
