"""Running the server: the listening socket, uvicorn, and a clean stop that saves the caches.

`chinwag serve` runs `serve_forever` (it owns the engine and handles SIGINT/SIGTERM); the
window runs an `ApiServer` as a task on its own loop with its own engine.
"""

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import replace

import uvicorn

from app.server import limits
from app.server.api import create_app
from app.server.connections import Connections, QuietAcceptErrors, protocol_class
from app.server.conversations import ConversationMap
from app.server.http import ServerConfig
from app.server.service import ChatService
from engine.errors import ChinwagError
from engine.protocol import EngineAPI

log = logging.getLogger("chinwag.server")
LISTEN_BACKLOG = 128  # connections the kernel holds before they are accepted
SHUTDOWN_GRACE_S = 5  # open streams get this long to end once their turns are stopped
# Headless, nobody waits on a window: every cache in memory is saved on stop (within the disk budget),
# bounded below systemd's 90 s before SIGKILL. The window keeps the engine's short default.
SAVE_ON_STOP_S = 60.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_config(config: ServerConfig) -> None:
    """Refuse what would be unsafe or cannot work, before anything loads."""
    if not is_loopback(config.host) and not config.api_key:
        raise ChinwagError(
            f"--host {config.host} lets other machines in: give an API key (--api-key-env VAR or --api-key KEY)"
        )
    if not 0 <= config.port <= 65535:
        raise ChinwagError(f"--port must be from 0 to 65535, got {config.port}")


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (port 0: a free one); a one-line error if the address is taken or unknown."""
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
        sock.listen(LISTEN_BACKLOG)
    except OSError as e:
        raise ChinwagError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.setblocking(False)
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling (whoever runs it decides), stopping the engine's turns on exit."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals stay with whoever runs the loop (chinwag serve, or the window)

    def request_exit(self) -> None:
        self.should_exit = True
        self.on_exit()


class ApiServer:
    """The OpenAI-compatible server on an engine someone else owns (the window's, or serve_forever's)."""

    def __init__(self, engine: EngineAPI, config: ServerConfig) -> None:
        check_config(config)
        self.engine = engine
        self.config = config
        self.service = ChatService(engine, config.allow_switch, ConversationMap())
        self.service.conversations.load()
        self._sock: socket.socket | None = None
        self._server: _Uvicorn | None = None
        self.connections: Connections | None = None  # while serving
        self.task: asyncio.Task[None] | None = None  # our own reference: qasync keeps none

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1] if self._sock else self.config.port

    @property
    def url(self) -> str:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/v1"

    def start(self) -> asyncio.Task[None]:
        """Bind now (a taken port fails here, as a ChinwagError) and serve in a task on the running loop."""
        self._sock = bind(self.config.host, self.config.port)
        app = create_app(self.service, replace(self.config, port=self.port))  # the port Host headers name
        self.connections = Connections(limits.MAX_CONNECTIONS, limits.HEADER_TIMEOUT_S)
        uv_config = uvicorn.Config(
            app,
            http=protocol_class(self.connections),  # h11, with a header deadline and a connection cap
            log_config=None,  # chinwag's own logging (engine/log.py) stays as it is
            access_log=False,
            lifespan="off",
            timeout_keep_alive=limits.KEEP_ALIVE_S,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            backlog=LISTEN_BACKLOG,  # asyncio tries accept() this often a tick: when each fails, a retry each
        )
        self._server = _Uvicorn(uv_config, on_exit=self._stop_turns)
        loop = asyncio.get_running_loop()
        QuietAcceptErrors.install(loop)  # out of descriptors: a line, not a traceback per accept()
        self.task = loop.create_task(self._server.serve(sockets=[self._sock]))
        return self.task

    def _stop_turns(self) -> None:
        for conv_id in self.service.active:  # only the server's own turns: the window's chat goes on
            self.engine.stop(conv_id)

    async def stop(self) -> None:
        """Stop accepting, end the running turn, let open responses finish; the map is saved."""
        if self._server is not None:
            self._server.request_exit()
        if self.task is not None:
            try:
                await self.task
            finally:
                self.task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        await asyncio.to_thread(self.service.conversations.save, self.service.conversations.dumps())


async def serve_forever(
    config: ServerConfig,
    engine: EngineAPI,
    ready: Callable[[ApiServer], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Load the model, serve until SIGINT/SIGTERM (or `stop` is set), then close the engine (saving caches).

    `ready(server)` is called once it listens.
    """
    import signal

    check_config(config)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests), or Windows
            pass
    try:
        if config.model:
            await engine.load_model(config.model)
        server = ApiServer(engine, config)
        task = server.start()
        if ready is not None:
            ready(server)
        waiter = asyncio.ensure_future(stop.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        await server.stop()
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await engine.close()
