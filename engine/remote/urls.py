"""Server URLs: the API base a user's URL names, a URL fit for messages, a short label for a host.

No imports from the rest of engine/remote: servers, specs and error messages all use these.
"""

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from engine.errors import ChinwagError

# Query parameters that hold a secret (api_key, key, token, access_token, password, sig...):
# never kept in a model id, a message or a saved server.
_SECRET_PARAM = re.compile(r"key|token|secret|pass|pwd|sig|auth|credential|session", re.I)


def _bad(text: str, why: str) -> ChinwagError:
    return ChinwagError(f"not a server URL: '{display_url(text)}' {why} (expected http://HOST:PORT or https://HOST/v1)")


def secret_params(url: str) -> list[str]:
    """The names of the query parameters of `url` that hold a secret."""
    try:
        query = urlsplit(str(url)).query
    except ValueError:
        return []
    return [name for name, _ in parse_qsl(query, keep_blank_values=True) if _SECRET_PARAM.search(name)]


def normalize_url(url: str) -> str:
    """The API base for a user's URL: http(s), a host, no query; a bare host gets /v1. One line
    (ChinwagError) for anything urlsplit, IDNA or httpx would refuse, before anything is saved."""
    import httpx

    text = str(url).strip()
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise _bad(text, "has a space or a control character")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError as e:
        raise _bad(text, f"cannot be read ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(text, "is not an http(s) URL with a host")
    if parts.username or parts.password:  # it would be saved and logged with the URL
        raise ChinwagError(
            f"the server URL '{display_url(text)}' has a user:password part: "
            "give the key as the server's API key instead"
        )
    if names := secret_params(text):
        raise ChinwagError(
            f"the server URL '{display_url(text)}' carries a secret in its query ({names[0]}=…): "
            "save the server with its key instead (chinwag servers add NAME URL --api-key-env VAR) "
            "and chat with NAME/MODEL"
        )
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/models"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    base = urlunsplit((parts.scheme, parts.netloc, path or "/v1", "", ""))
    try:
        checked = httpx.URL(base)
        checked.raw_host, checked.host  # noqa: B018 - the host as IDNA encodes and decodes it
    except (httpx.InvalidURL, UnicodeError, ValueError) as e:
        raise _bad(text, f"has a host that cannot be used ({str(e)[:120]})") from None
    return base


def display_url(url: str) -> str:
    """A URL fit for messages: any user:password part removed, secrets in its query hidden."""
    text = str(url)
    try:
        parts = urlsplit(text)
        host, port = parts.hostname or "", parts.port
    except ValueError:  # not a URL urlsplit can read: shown without its query and credentials
        return text.split("?", 1)[0].rsplit("@", 1)[-1]
    netloc = parts.netloc
    if parts.username or parts.password:
        netloc = host + (f":{port}" if port else "")
    query = parts.query
    if secret_params(text):
        pairs = (p.partition("=") for p in query.split("&"))
        query = "&".join(k + eq + ("…" if _SECRET_PARAM.search(k) else v) for k, eq, v in pairs)
    if (netloc, query) == (parts.netloc, parts.query):
        return text
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def host_label(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or url)
