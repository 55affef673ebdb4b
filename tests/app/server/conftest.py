"""The server on loopback: `serve_forever` with a real engine, on its own loop in a background thread."""

import asyncio
import threading
from dataclasses import dataclass

import pytest

from app.server.http import ServerConfig


@dataclass
class Running:
    server: object  # app.server.run.ApiServer
    url: str
    thread: threading.Thread
    loop: asyncio.AbstractEventLoop
    stop_event: asyncio.Event
    errors: list

    def stop(self, timeout: float = 60) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server did not stop"
        assert not self.errors, self.errors


def start_server(config: ServerConfig, engine=None) -> Running:
    from app.server.run import serve_forever
    from engine import Engine

    box: dict = {}
    ready = threading.Event()
    errors: list = []

    def run():
        async def main():
            box["loop"] = asyncio.get_running_loop()
            box["stop"] = asyncio.Event()

            def on_ready(server):
                box["server"] = server
                ready.set()

            await serve_forever(config, engine or Engine(), on_ready, box["stop"])

        try:
            asyncio.run(main())
        except BaseException as e:  # noqa: BLE001 - surfaced by stop() or the wait below
            errors.append(e)
            ready.set()

    thread = threading.Thread(target=run, name="test-server", daemon=True)
    thread.start()
    assert ready.wait(120), "the server did not start"
    if errors:
        raise errors[0]
    server = box["server"]
    return Running(server, server.url, thread, box["loop"], box["stop"], errors)


@pytest.fixture
def serve(tiny_model_path):
    """serve(engine=None, **config) -> Running on a free loopback port with the tiny model; stopped after the test."""
    running: list[Running] = []

    def start(engine=None, **options) -> Running:
        config = ServerConfig(**{"port": 0, "model": str(tiny_model_path), **options})
        r = start_server(config, engine)
        running.append(r)
        return r

    yield start
    for r in running:
        if r.thread.is_alive():
            r.stop()
