"""Who may talk to the server: the Host a request names (421 otherwise) and the page it comes from (403).

A page on any web site can make the browser send requests to 127.0.0.1, and DNS rebinding can make
a site's own name point there. Both show in the headers: a rebound name is in `Host`, and a page's
requests carry its `Origin`. So the server answers only requests whose Host names it (its loopback
names and `--host` with its port, and names added with `--allowed-host`) and, when a request says
which page sent it, only pages the user allowed with `--cors-origin`.
"""

import ipaddress
import socket

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.server.errors import ApiError, refuse

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")  # listening on every address


def split_host(value: str) -> tuple[str, int | None]:
    """A Host header (or an --allowed-host name) as (name, port): lower case, IPv6 in brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name += "]"
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, colon, port = value.rpartition(":")
        if not colon or not port.isdigit() or ":" in name:  # no port, or a bare IPv6 address
            name, port = value, ""
            if ":" in value:
                name = f"[{value}]"
    if port and not port.isdigit():
        port = "x"  # never matches
    return name.rstrip("."), int(port) if port.isdigit() else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


class HostCheck:
    """Which Host headers name this server (listening on `host`, `port`)."""

    def __init__(self, host: str, port: int, allowed: tuple[str, ...] = ()) -> None:
        self.port = port
        own = {split_host(name)[0] for name in LOOPBACK_NAMES}
        self.wildcard = host in WILDCARD_HOSTS
        if self.wildcard:  # every address of this machine: its name, and any address (an IP is never rebound)
            machine = socket.gethostname().lower()
            own |= {machine, f"{machine}.local"}
        else:
            own.add(split_host(host)[0])
        self.own = own
        self.any = "*" in allowed
        self.names = {split_host(a) for a in allowed if a != "*" and not a.startswith("*.")}
        self.suffixes = tuple(a[1:].lower() for a in allowed if a.startswith("*."))

    def allows(self, header: str | None) -> bool:
        if self.any:
            return True
        if not header:
            return False
        name, port = split_host(header)
        port = 80 if port is None else port
        if port == self.port and (name in self.own or (self.wildcard and _is_ip(name))):
            return True
        # An added name answers on any port (a reverse proxy's name has the proxy's), unless it gave one.
        return (name, None) in self.names or (name, port) in self.names or name.endswith(self.suffixes)

    def described(self) -> str:
        names = ", ".join(sorted(self.own)) + (", any IP address" if self.wildcard else "")
        return f"{names} on port {self.port}"


class Guard:
    """ASGI middleware: 421 for a Host that does not name this server, 403 for an Origin not allowed."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, allowed_hosts: tuple[str, ...], origins: tuple[str, ...]
    ) -> None:
        self.app = app
        self.hosts = HostCheck(host, port, allowed_hosts)
        self.origins = {o.rstrip("/") for o in origins}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.check(Headers(scope=scope))
        if error is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else "?"
        await refuse(error, scope["method"], scope["path"], where)(scope, receive, send)

    def check(self, headers: Headers) -> ApiError | None:
        host = headers.get("host")
        if not self.hosts.allows(host):
            name = split_host(host)[0] if host else ""
            told = f"Host {host!r:.80}" if host else "a request without a Host header"
            fix = f"; to answer to that name, start the server with --allowed-host {name:.80}" if name else ""
            return ApiError(421, f"{told} does not name this server (it answers to {self.hosts.described()}){fix}")
        origin = headers.get("origin")
        if origin is not None and "*" not in self.origins and origin.rstrip("/") not in self.origins:
            return ApiError(
                403,
                f"requests from web pages at {origin!r:.80} are not allowed; "
                f"to let them in, start the server with --cors-origin {origin:.80}",
            )
        return None
