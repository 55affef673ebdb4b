"""`chinwag serve` out of file descriptors: asyncio wrote a traceback into the log for every accept()
that failed (about 1,900 in 3 s, 890 KB; issue 35, re-tried under `ulimit -n 256`); now a line every
10 s, and the server still answers once the connections are gone."""

import os
import re
import resource
import socket
import subprocess
import sys
import time

import httpx

from tests.conftest import ROOT

LIMIT = 96  # descriptors for the whole serve process: a few dozen are its own


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_flood_of_connections_past_the_descriptor_limit_is_a_line_in_the_log_not_a_flood(
    tiny_model_path, chinwag_home
):
    env = {**os.environ, "CHINWAG_HOME": str(chinwag_home)}
    cmd = [sys.executable, "-m", "app.cli.main", "serve", "--model", str(tiny_model_path), "--port", "0"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_low_limit
    )
    held: list[socket.socket] = []
    try:
        url = re.search(r"http://127\.0\.0\.1:(\d+)/v1", proc.stdout.readline())
        port = int(url.group(1))
        for _ in range(2 * LIMIT):  # more connections than the server has descriptors
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(3)  # asyncio retries accept() every second while they last
        for s in held:
            s.close()
        held.clear()
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}
        deadline = time.monotonic() + 30
        while True:  # it serves again once the flood is gone
            try:
                if httpx.post(url.group(0) + "/chat/completions", json=body, timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not answer after the flood"
            time.sleep(0.5)
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(timeout=60)
    log = (chinwag_home / "chinwag.log").read_text(errors="replace")
    assert log.count("out of system resource") <= 1 and log.count("Traceback") == 0, log[-3000:]
    assert 1 <= log.count("cannot accept a connection") <= 2
