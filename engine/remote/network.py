"""The network thread: one asyncio loop of its own for every request, and the way events come back.

httpx runs on plain asyncio there, so no read ever happens on a front end's (Qt) loop; a
`Relay` hands what a request produces to the caller's loop, and the turn's `StopSignal`
(engine/backend.py) cancels the request from any thread. Every response is read in bounded
pieces (LIMITS; compressed bodies inflated step by step) under a deadline for the whole
exchange, so a server elsewhere can neither fill memory nor hold a request forever. No MLX here.
"""

import asyncio
import concurrent.futures
import re
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.backend import StopSignal
from engine.remote import errors

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Limits:
    """What one response may cost. No real server comes near these; a hostile one is cut off at them."""

    line_bytes: int = 1 << 20  # one line of a stream (a big tool call's arguments are ~100 KB)
    event_bytes: int = 4 << 20  # one server-sent event's data lines together
    body_bytes: int = 8 << 20  # a model list (real ones are a few KB)
    error_bytes: int = 64 << 10  # an error body: only its start is ever shown
    stream_bytes: int = 256 << 20  # a whole streamed reply, decompressed


LIMITS = Limits()
# Encodings read here, in bounded pieces (a 1 MB gzip body can inflate to 1 GB).
ACCEPT_ENCODING = "gzip, deflate"
_PIECE = 64 << 10
_LINE_END = re.compile(rb"\r\n|\r|\n")
_SSE_FIELD = re.compile(r"(data|event|id|retry)?:")

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
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self.task: concurrent.futures.Future[None] | None = None

    def put(self, event: object) -> None:
        """From the network thread to the caller's loop."""
        try:
            self._caller.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the caller's loop has closed: nobody is listening
            pass

    def run(self, request: Coroutine[Any, Any, None], stop: StopSignal) -> concurrent.futures.Future[None]:
        self.task = task = asyncio.run_coroutine_threadsafe(request, network_loop())
        task.add_done_callback(lambda _t: self.put(_DONE))
        stop.watch(task)
        return task

    async def events(self, stop: StopSignal) -> AsyncIterator[object]:
        """What the request put, until it ends or `stop` is set (nothing after a stop, even if received)."""
        while True:
            event = await self._queue.get()
            if event is _DONE or stop.is_set():
                return
            yield event


class Inflater:
    """A body's Content-Encoding undone in pieces of at most _PIECE bytes, so a bomb costs no memory."""

    def __init__(self, encoding: str):
        encoding = encoding.strip().lower()
        if encoding in ("", "identity"):
            self._z = None
        elif encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif encoding == "deflate":  # zlib-wrapped, as the standard says (raw deflate is seen to in feed)
            self._z = zlib.decompressobj()
        else:
            raise errors.StreamLimit(f"sent its reply in an encoding Chinwag does not read ({encoding[:40]!r})")
        self.encoding = encoding
        self._started = False  # a deflate body's first byte says whether it has a zlib header

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._z is None:
            yield data
            return
        if not self._started and data and self.encoding == "deflate" and (data[0] & 0x0F) != 8:
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)  # no zlib header: raw deflate, as some servers send
        self._started = self._started or bool(data)
        try:
            piece = self._z.decompress(data, _PIECE)
            while piece:
                yield piece
                piece = self._z.decompress(self._z.unconsumed_tail, _PIECE) if self._z.unconsumed_tail else b""
        except zlib.error:
            raise errors.StreamLimit(f"sent a damaged {self.encoding} body") from None


async def _body(response: "httpx.Response", budget: int, what: str = "") -> AsyncIterator[bytes]:
    """The decoded body in bounded pieces; past `budget` bytes StreamLimit (naming `what`), or the end
    of the body when `what` is empty (an error body: only its start is kept)."""
    inflate = Inflater(response.headers.get("content-encoding", ""))
    total = 0
    async for raw in response.aiter_raw():
        for piece in inflate.feed(raw):
            total += len(piece)
            if total > budget:
                if what:
                    raise errors.StreamLimit(f"sent {what} over {budget:,} bytes: Chinwag stopped reading it")
                yield piece[: len(piece) - (total - budget)]
                return
            yield piece


async def _read(response: "httpx.Response", budget: int, what: str = "") -> bytes:
    return b"".join([piece async for piece in _body(response, budget, what)])


class Lines:
    """Lines out of bytes (CR, LF or CRLF ends one), none longer than `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._pending = b""

    def feed(self, data: bytes) -> list[str]:
        buffer = self._pending + data
        parts = _LINE_END.split(buffer)
        # A CR at the very end may be the first half of a CRLF: keep it for the next piece.
        self._pending = parts.pop()
        if buffer.endswith(b"\r") and parts:
            self._pending, parts = parts.pop() + b"\r", parts
        # The lines that did end go out first; an overlong unfinished one stops the next feed.
        if any(len(p) > self.max_bytes for p in parts) or (not parts and len(self._pending) > self.max_bytes):
            raise self._too_long()
        return [p.decode("utf-8", "replace") for p in parts]

    def unfinished(self) -> bool:
        return bool(self._pending)

    def end(self) -> list[str]:
        rest, self._pending = self._pending.removesuffix(b"\r"), b""
        if len(rest) > self.max_bytes:
            raise self._too_long()
        return [rest.decode("utf-8", "replace")] if rest else []

    def _too_long(self) -> errors.StreamLimit:
        return errors.StreamLimit(f"sent a line over {self.max_bytes:,} bytes: Chinwag stopped reading the reply")


class Watch:
    """When a streamed reply gives up: `idle_s` after its last progress (keepalives that report no
    progress do not count), and `first_s` after its start if no piece of the reply came by then."""

    def __init__(self, idle_s: float, first_s: float):
        self.idle_s, self.first_s = idle_s, first_s
        self.started = self.last = time.monotonic()
        self.replying = False
        self.heard = False  # bytes since the last progress (keepalives)
        self.unfinished = False  # the last bytes heard are a line not ended yet

    def progress(self, replying: bool = False) -> None:
        self.last = time.monotonic()
        self.replying = self.replying or replying
        self.heard = False

    def due(self) -> float:
        """When to give up, on the running loop's clock."""
        idle = self.last + self.idle_s
        due = idle if self.replying else min(idle, self.started + self.first_s)
        return asyncio.get_running_loop().time() + due - time.monotonic()

    def expired(self) -> errors.TimedOut:
        now = time.monotonic()
        if not self.replying and now >= self.started + self.first_s:
            return errors.TimedOut(f"sent no reply within {errors.seconds(self.first_s)} (gave up waiting)")
        if self.heard and self.unfinished:
            return errors.TimedOut(
                f"sent one line for {errors.seconds(self.idle_s)} without ending it (gave up waiting)"
            )
        if self.heard:
            return errors.TimedOut(f"sent only keepalives for {errors.seconds(self.idle_s)} (gave up waiting)")
        return errors.TimedOut(f"stopped sending for {errors.seconds(self.idle_s)} (read timed out)")


def _client() -> "httpx.AsyncClient":
    import httpx

    # The deadlines are ours (asyncio.timeout around the whole exchange), not per read.
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None, connect=errors.CONNECT_TIMEOUT_S),
        follow_redirects=True,
        headers={"Accept-Encoding": ACCEPT_ENCODING},
    )


async def post_lines(
    url: str, body: dict[str, Any], headers: dict[str, str], on_line: Callable[[str], bool], watch: Watch
) -> None:
    """POST `body` as JSON and hand each line of the reply to `on_line` until it returns True.

    A status other than 200 raises ServerError with (the start of) the body; the end of the
    reply hands a last empty line, which ends an event left open. `watch` (its progress set by
    `on_line`) decides when a silent reply gives up: TimedOut. Past a bound of LIMITS:
    StreamLimit. Runs on the network loop.
    """
    limits = LIMITS
    try:
        async with asyncio.timeout_at(watch.due()) as deadline, _client() as client:
            async with client.stream("POST", url, json=body, headers=headers) as r:
                if r.status_code != 200:
                    raise errors.ServerError(r.status_code, await _read(r, limits.error_bytes))
                read = _reader(r.headers.get("content-type", ""), on_line)
                lines = Lines(limits.line_bytes)
                async for piece in _body(r, limits.stream_bytes, "a reply"):
                    watch.heard = True
                    for line in lines.feed(piece):
                        if read(line):
                            return
                    watch.unfinished = lines.unfinished()
                    deadline.reschedule(watch.due())
                for line in [*lines.end(), ""]:
                    if read(line):
                        return
    except TimeoutError:
        raise watch.expired() from None


def _reader(content_type: str, on_line: Callable[[str], bool]) -> Callable[[str], bool]:
    """How a chat reply's lines are read: an event stream's as they are; a whole reply in JSON (a
    server that ignores `stream`) as one event's data lines. A web page is no reply: NotAStream."""
    media = content_type.split(";")[0].strip().lower()
    if media in ("text/html", "application/xhtml+xml"):
        raise errors.NotAStream(f"answered with {media}, not an event stream (is it an OpenAI API?)")
    if media != "application/json":
        return on_line
    # An event stream mislabelled as JSON keeps its fields; a JSON body's lines become data lines.
    return lambda line: on_line(line if not line.strip() or _SSE_FIELD.match(line) else "data: " + line)


async def _get(url: str, headers: dict[str, str], total_s: float) -> tuple[int, bytes]:
    limits = LIMITS
    try:
        async with asyncio.timeout(total_s), _client() as client:
            async with client.stream("GET", url, headers=headers) as r:
                if r.status_code != 200:
                    return r.status_code, await _read(r, limits.error_bytes)
                return r.status_code, await _read(r, limits.body_bytes, "a model list")
    except TimeoutError:
        raise errors.TimedOut(f"did not answer within {errors.seconds(total_s)}") from None


def get(url: str, headers: dict[str, str], total_s: float) -> tuple[int, bytes]:
    """(status, body) of GET `url`, the whole exchange within `total_s` (TimedOut past it); the body
    bounded by LIMITS. Blocks the calling thread, never the network loop's."""
    if threading.current_thread().name == "chinwag-network":
        raise RuntimeError("network.get would wait on its own loop")
    return asyncio.run_coroutine_threadsafe(_get(url, headers, total_s), network_loop()).result()
