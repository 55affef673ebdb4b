"""What a server's failures say: one line, naming the server, never the key.

Also the request's timeouts and headers, which those lines mention. No imports from the rest of
engine/remote but the URL helpers, so servers, specs and the backend all use it without a cycle.
"""

import json
import re
from typing import Protocol
from urllib.parse import quote

from engine.errors import ChinwagError, ContextOverflowError
from engine.remote.urls import display_url

CONNECT_TIMEOUT_S = 10.0
# A reply gives up after this long without progress: a new piece of the reply, or a keepalive
# comment whose count of prompt tokens read has grown. Bare keepalives (a space, a comment)
# do not reset it, so a server that only keeps the connection open cannot hold a chat forever.
READ_TIMEOUT_S = 300.0
# A prefill of a long history on a big model can take minutes (mlx_lm.server reports its
# progress meanwhile); past this without a first piece of the reply, the request gives up.
PROMPT_TIMEOUT_S = 1800.0
REDACTED = "[redacted]"
# An Authorization header echoed back: its scheme stays, its credential (8 characters or more,
# so "bearer token required" stays readable) goes. Our own key goes whatever its length.
_CREDENTIAL = re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s\"',;}\]]{8,}")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CLOSED = re.compile(r"closed|disconnected|without sending", re.I)  # the connection ended, not bad HTTP
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

    @property
    def api_key(self) -> str: ...


class ServerError(Exception):
    """A reply other than HTTP 200: its status and (the start of) its body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.body = status, body


class StreamLimit(ChinwagError):
    """A response past one of the bounds in engine/remote/network.py (bytes, line length)."""


class PastMaxTokens(StreamLimit):
    """A stream that kept sending pieces well past the reply's max_tokens: the reply is cut there."""


class NotAStream(ChinwagError):
    """A chat request answered 200 with something that is no reply (a web page)."""


class TimedOut(ChinwagError):
    """A deadline passed; the message names the figure that passed."""


def seconds(value: float) -> str:
    return f"{value:g} s"


def redact(text: str, *secrets: str) -> str:
    """`text` without the secrets (as sent, or URL-encoded) and without any bearer or basic credential."""
    for secret in secrets:
        secret = secret.strip()  # as it is sent (check_key strips it)
        for form in sorted({secret, quote(secret, safe="")}, key=len, reverse=True):
            if form:
                text = text.replace(form, REDACTED)
    return _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def check_key(key: str, where: str = "the API key") -> str:
    """The key as an Authorization header can carry it, surrounding whitespace (a trailing newline)
    stripped; a control or non-ASCII character is one line that never shows the key."""
    key = str(key).strip()
    for i, ch in enumerate(key):
        if not " " <= ch <= "~":
            what = "a control character" if ch.isascii() or not ch.isprintable() else "a non-ASCII character"
            raise ChinwagError(f"{where} has {what} at position {i + 1}: an API key is plain ASCII on one line")
    return key


def headers_for(api_key: str, server_name: str = "") -> dict[str, str]:
    if not api_key:
        return {}
    where = f"the saved API key of server {server_name}" if server_name else "the API key"
    return {"Authorization": f"Bearer {check_key(api_key, where)}"}


def _json(text: str) -> object:
    """Parsed JSON, or None for text that is not JSON (or nested deeper than the parser goes)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def server_message(body: bytes, secret: str = "") -> str:
    """The message in an error body: {"error": "..."}, {"error": {"message": ...}}, {"detail": ...};
    without `secret` (the API key a server may echo back) or any credential."""
    text = body.decode("utf-8", "replace").strip()
    data = _json(text)
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("detail") or _dumps(value)
            if value:  # JSON's "\ud800" is a lone surrogate: no terminal, log or database takes it
                return _LONE_SURROGATE.sub("\ufffd", redact(" ".join(str(value).split()), secret)[:300])
    return redact(" ".join(text.split()), secret)[:200]


def _dumps(value: object) -> str:
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        return ""


def response_error(status: int, body: bytes, secret: str = "") -> str:
    message = server_message(body, secret)
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "denied access"
        return f"{what} (HTTP {status}{': ' + message if message else ''}); check the server's API key"
    if status == 404 and message:
        return f"HTTP 404: {message} (unknown model?)"
    return f"HTTP {status}" + (f": {message}" if message else " with no message")


def chat_error(e: ServerError, server: _Named, model: str) -> ChinwagError:
    """What a chat request's non-200 reply raises; a history too long for the server is a ContextOverflowError."""
    message = response_error(e.status, e.body, server.api_key)
    if e.status == 404:
        message = f"unknown model '{model}' ({message.removesuffix(' (unknown model?)')})"
    if e.status in (400, 413, 422) and _OVERFLOW.search(server_message(e.body, server.api_key)):
        return ContextOverflowError(f"server {server.name}: the history is too long: {message}")
    return ChinwagError(f"server {server.name}: {message}")


def _causes(e: BaseException) -> str:
    """The texts of `e` and what caused it (the async client hides "refused" two causes down)."""
    texts, seen = [], set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        texts.append(f"{type(cause).__name__} {cause}")
        cause = cause.__cause__ or cause.__context__
    return " ".join(texts)


def _connect_error(e: Exception, text: str, where: str) -> str:
    low = _causes(e).lower()
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
    """One line for a failure of the network or the HTTP exchange, without the server's key."""
    import httpx

    where = display_url(server.url)
    text = " ".join(redact(str(e), server.api_key).split())
    if isinstance(e, httpx.ConnectTimeout):
        return f"no answer from {where} (connection timed out after {seconds(CONNECT_TIMEOUT_S)})"
    if isinstance(e, httpx.TimeoutException):
        return f"did not answer in time ({text[:160] or type(e).__name__})"
    if isinstance(e, httpx.ConnectError):
        return _connect_error(e, text, where)
    if isinstance(e, httpx.RemoteProtocolError) and not _CLOSED.search(text):  # h11 refused what it sent
        return f"sent a malformed HTTP response ({text[:120]})"
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "closed the connection mid-reply"
    if isinstance(e, (httpx.InvalidURL, httpx.UnsupportedProtocol)):
        return f"cannot use the URL {where}: {text[:160]}"
    return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


def is_http_error(e: BaseException) -> bool:
    """A failure of the network or the HTTP exchange, not a bug."""
    import httpx

    return isinstance(e, (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL, OSError))
