"""Start the test MCP servers: their mcp.json entries (stdio) and an HTTP one on loopback."""

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("servers.py"))


def stdio_entry(kind: str, *args: str) -> dict:
    return {"command": sys.executable, "args": [SCRIPT, kind, *args]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(kind: str, *args: str):
    """A streamable HTTP MCP server on 127.0.0.1; yields its URL; stopped after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, kind, "--http", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {kind} HTTP server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)
