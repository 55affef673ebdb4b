"""The API key check: a bearer token compared in constant time."""

import hmac

from app.server.errors import ApiError


def check_key(authorization: str | None, api_key: str) -> None:
    """Raise a 401 unless `authorization` is `Bearer <api_key>` (nothing to check without a key)."""
    if not api_key:
        return
    scheme, _, token = (authorization or "").partition(" ")
    given = token.strip().encode("utf-8", "surrogateescape") if scheme.lower() == "bearer" else b""
    # compare_digest: how long the comparison takes says nothing about the key.
    if not hmac.compare_digest(given, api_key.encode("utf-8")):
        raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", code="invalid_api_key")
