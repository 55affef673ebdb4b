"""Resources bounded, with real sockets on loopback: a connection must send its headers in time, the open
connections are capped, and a whole reply whose client goes away is stopped."""

import json
import socket
import time

import httpx
import pytest

from app.server import limits
from tests.app.server.test_errors import HELLO, error_of
from tests.app.server.test_lifecycle import long_context_model  # noqa: F401 (fixture)


def connect(s) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", s.server.port), timeout=10)
    sock.settimeout(10)
    return sock


def closed_after(sock: socket.socket) -> float:
    """Seconds until the server closes `sock` (recv returns nothing or the connection resets)."""
    start = time.monotonic()
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def trickle_until_closed(sock: socket.socket, limit_s: float) -> float | None:
    """Send a request's headers a byte every 0.2 s; seconds until the server closed it (None: it never did)."""
    start = time.monotonic()
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nX-Slow: ")
    sock.settimeout(0.2)
    while time.monotonic() - start < limit_s:
        try:
            if sock.recv(1) == b"":
                return time.monotonic() - start
        except TimeoutError:
            pass
        except ConnectionResetError:
            return time.monotonic() - start
        try:
            sock.sendall(b"a")
        except OSError:
            return time.monotonic() - start
    return None


@pytest.mark.timing
def test_a_connection_that_sends_no_headers_in_time_is_closed(serve, monkeypatch):
    monkeypatch.setattr(limits, "HEADER_TIMEOUT_S", 1.0)
    s = serve()
    opened = time.monotonic()
    silent = connect(s)
    took = trickle_until_closed(connect(s), 6)  # data keeps coming, the headers never end
    assert took is not None and took < 3, took
    closed_after(silent)
    assert time.monotonic() - opened < 4  # the silent one too
    assert s.server.connections.closed_idle == 2
    with httpx.Client() as c:  # a real client is served as ever
        assert c.get(s.url + "/models").status_code == 200


def test_a_flood_of_half_open_sockets_does_not_lock_out_a_client(serve, monkeypatch):
    monkeypatch.setattr(limits, "MAX_CONNECTIONS", 8)
    monkeypatch.setattr(limits, "HEADER_TIMEOUT_S", 60.0)  # so only the cap can make room
    s = serve()
    flood = [connect(s) for _ in range(40)]
    try:
        time.sleep(0.2)
        assert len(s.server.connections.open) <= 9  # the cap, and the newest one
        r = httpx.get(s.url + "/models", timeout=10)
        assert r.status_code == 200
        # The oldest half-open sockets were closed to make room.
        assert closed_after(flood[0]) < 5
    finally:
        for sock in flood:
            sock.close()


def test_past_the_cap_with_every_connection_in_a_request_a_client_gets_a_503(serve, monkeypatch):
    monkeypatch.setattr(limits, "MAX_CONNECTIONS", 2)
    s = serve()
    busy = []
    try:
        for _ in range(2):  # requests whose bodies never come: each holds its connection
            sock = connect(s)
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % s.server.port)
            sock.sendall(b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
            busy.append(sock)
        time.sleep(0.3)
        r = httpx.get(s.url + "/models", timeout=10)
        assert "connections" in error_of(r, 503)["message"] and r.headers["connection"] == "close"
    finally:
        for sock in busy:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(s.url + "/models", timeout=10).status_code == 200


@pytest.mark.timing
def test_a_whole_reply_whose_client_goes_away_is_stopped_within_a_second(serve, long_context_model):  # noqa: F811
    s = serve(model=str(long_context_model))
    story = [{"role": "user", "content": "Tell me a story about a cat and a long journey."}]  # a long greedy reply
    body = json.dumps({"messages": story, "max_tokens": 40_000, "temperature": 0}).encode()
    sock = connect(s)
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{s.server.port}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + body)
    deadline = time.monotonic() + 60
    while not s.server.service.active and time.monotonic() < deadline:  # its turn is generating
        time.sleep(0.05)
    time.sleep(0.5)
    sock.close()
    gone = time.monotonic()
    while not s.server.service.recent and time.monotonic() < gone + 30:
        time.sleep(0.02)
    stopped = time.monotonic() - gone
    (record,) = s.server.service.recent
    assert record.finish_reason == "cancelled" and 0 < record.completion_tokens < 40_000
    assert stopped < 1.5, stopped
    # The queue is free: the next request is served at once.
    ok = httpx.post(s.url + "/chat/completions", json={"messages": HELLO, "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200
