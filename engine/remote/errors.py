"""What a server's failures say: one line, naming the server, never the key.

Also the request's timeouts and headers, which those lines mention. No imports from the rest of
engine/remote but the URL helpers, so servers, specs and the backend all use it without a cycle.
"""

import json
import re
from typing import Protocol

from engine.errors import ChinwagError, ContextOverflowError
from engine.remote.urls import display_url

CONNECT_TIMEOUT_S = 10.0
# A prefill of a long history on a big model can take minutes; mlx_lm.server sends keepalive
# comments meanwhile, and any byte resets this.
READ_TIMEOUT_S = 300.0
_OVERFLOW = re.compile(
    r"context (length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? the (available |model's )?context",
    re.I,
)


class _Named(Protocol):
    """A server as these messages need it (engine/remote/servers.py Server)."""

    @property
    def name(self) -> str: ...

    @property
    def url(self) -> str: ...


class ServerError(Exception):
    """A reply other than HTTP 200: its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


def headers_for(api_key: str) -> dict:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def server_message(body: bytes) -> str:
    """The message in an error body: {"error": "..."}, {"error": {"message": ...}}, {"detail": ...}."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("detail") or json.dumps(value)
            if value:
                return " ".join(str(value).split())[:300]
    return " ".join(text.split())[:200]


def response_error(status: int, body: bytes) -> str:
    message = server_message(body)
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "denied access"
        return f"{what} (HTTP {status}{': ' + message if message else ''}); check the server's API key"
    if status == 404 and message:
        return f"HTTP 404: {message} (unknown model?)"
    return f"HTTP {status}" + (f": {message}" if message else " with no message")


def chat_error(e: ServerError, server: _Named, model: str) -> ChinwagError:
    """What a chat request's non-200 reply raises; a history too long for the server is a ContextOverflowError."""
    message = response_error(e.status, e.body)
    if e.status == 404:
        message = f"unknown model '{model}' ({message.removesuffix(' (unknown model?)')})"
    if e.status in (400, 413, 422) and _OVERFLOW.search(server_message(e.body)):
        return ContextOverflowError(f"server {server.name}: the history is too long: {message}")
    return ChinwagError(f"server {server.name}: {message}")


def _connect_error(e: Exception, where: str) -> str:
    text = str(e)
    low = text.lower()
    if "ssl" in low or "certificate" in low or "tls" in low:
        return f"TLS error talking to {where}: {text[:160]}"
    if (
        "name or service not known" in low
        or "nodename nor servname" in low
        or "getaddrinfo" in low
        or "name resolution" in low
    ):
        return f"cannot resolve the host of {where} (DNS lookup failed)"
    if "refused" in low:
        return f"connection refused at {where} (is the server running?)"
    return f"cannot connect to {where}: {text[:160] or type(e).__name__}"


def describe_http_error(e: Exception, server: _Named) -> str:
    import httpx

    where = display_url(server.url)
    text = str(e)
    if isinstance(e, httpx.ConnectTimeout):
        return f"no answer from {where} (connection timed out)"
    if isinstance(e, httpx.ReadTimeout):
        return f"stopped sending for {READ_TIMEOUT_S:.0f} s (read timed out)"
    if isinstance(e, httpx.ConnectError):
        return _connect_error(e, where)
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "closed the connection mid-reply"
    return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


def is_http_error(e: BaseException) -> bool:
    """A failure of the network or the HTTP exchange, not a bug."""
    import httpx

    return isinstance(e, (httpx.HTTPError, httpx.StreamError, OSError))
