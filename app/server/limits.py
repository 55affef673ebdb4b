"""Bounds on what a request may hold, checked before any of it reaches the engine."""

import json
import math
from typing import Any

from starlette.requests import Request

from app.server.errors import ApiError

MAX_BODY_BYTES = 8 * 1024 * 1024  # a 20,000-token chat is about 100 KB of JSON
MAX_MESSAGES = 4096
MAX_DIGITS = 400  # in one integer (a float's range ends at 309)
MAX_DEPTH = 16  # {"messages": [{"content": [{"text": ...}]}]} is 5 deep
MAX_STOP_SEQUENCES = 4  # as the OpenAI API
# Characters in one stop sequence: the reply's text that may start one is held back and searched on every
# token, so a 2 MB stop held the server's loop for minutes per token.
MAX_STOP_CHARS = 1000
MAX_TOOLS = 128  # as the OpenAI API
MAX_WAITING = 64  # requests queued for the engine before more get a 429
# Connections: a new one past MAX_CONNECTIONS closes the oldest that has no request under way (503 if
# every one has); one that has not sent a request's headers within HEADER_TIMEOUT_S is closed.
MAX_CONNECTIONS = 128
HEADER_TIMEOUT_S = 5.0
KEEP_ALIVE_S = 5  # an idle connection between requests (uvicorn's timeout_keep_alive)
DISCONNECT_POLL_S = 0.5  # how often a whole (non-streamed) reply checks that its client is still there


def check_json_type(request: Request) -> None:
    """415 unless the body is declared JSON: a web page can POST text/plain or a form without asking first."""
    declared = request.headers.get("content-type", "")
    media = declared.partition(";")[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        got = f"got {declared!r:.60}" if declared else "none was given"
        raise ApiError(415, f"Content-Type must be application/json; {got}")


async def read_json(request: Request) -> dict[str, Any]:
    """The request's JSON object; 415 unless declared JSON, 413 past MAX_BODY_BYTES, 400 for anything
    that is not a JSON object."""
    check_json_type(request)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body is {declared} bytes, more than the limit of {MAX_BODY_BYTES}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body is more than the limit of {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_not_json, parse_float=_finite, parse_int=_integer)
    except NotJson as e:
        raise ApiError(400, f"request body is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ApiError(400, f"request body is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ApiError(400, f"request body is nested more than {MAX_DEPTH} levels deep") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    if depth(body) > MAX_DEPTH:
        raise ApiError(400, f"request body is nested more than {MAX_DEPTH} levels deep")
    return body


class NotJson(ValueError):
    """A value Python's json module reads but JSON has not: NaN, Infinity, a number past a float."""


def _not_json(name: str) -> float:
    raise NotJson(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise NotJson(f"the number {text:.40} is out of range")
    return value


def _integer(text: str) -> int:
    if len(text) > MAX_DIGITS:  # past Python's 4,300 digits int() raised a ValueError: a bug's 500
        raise NotJson(f"a number of {len(text)} digits is out of range")
    return int(text)


def depth(value: object) -> int:
    """How deeply lists and objects nest in `value` (iterative: no recursion limit to hit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
