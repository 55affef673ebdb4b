"""Server URLs: the API base a user's URL names, a URL fit for messages, a short label for a host.

No imports from the rest of engine/remote: servers, specs and error messages all use these.
"""

from urllib.parse import urlsplit, urlunsplit

from engine.errors import ChinwagError


def normalize_url(url: str) -> str:
    """The API base for a user's URL: http(s), a host, no query; a bare host gets /v1."""
    text = str(url).strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ChinwagError(f"not a server URL: '{display_url(text)}' (expected http://HOST:PORT or https://HOST/v1)")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise ChinwagError(f"not a server URL: '{display_url(text)}' has a bad port") from None
    if parts.username or parts.password:  # it would be saved and logged with the URL
        raise ChinwagError(
            f"the server URL '{display_url(text)}' has a user:password part: "
            "give the key as the server's API key instead"
        )
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    return urlunsplit((parts.scheme, parts.netloc, path or "/v1", "", ""))


def display_url(url: str) -> str:
    """A URL fit for messages: any user:password part removed."""
    parts = urlsplit(str(url))
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    return str(url)


def host_label(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or url)
