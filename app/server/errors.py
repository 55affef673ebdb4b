"""Error objects: what a client sees when a request cannot be served, in OpenAI's shape or Anthropic's."""

import logging
import re
from typing import Any

from starlette.responses import JSONResponse

log = logging.getLogger("chinwag.server")

# The OpenAI API's error type for each status a request can get.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    421: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}
# Anthropic's error types (https://docs.anthropic.com/en/api/errors); others are invalid_request_error.
ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
}
ANTHROPIC_PREFIX = "/v1/messages"  # the routes whose errors take Anthropic's shape

# An absolute path in a message from the engine (a folder, a log file): shown by its last part only.
_PATH = re.compile(r"(?<![\w.:/~-])(?:~|[A-Za-z]:)?[/\\](?:[^\s/\\'\"`,;()\[\]{}<>]+[/\\])+([^\s/\\'\"`,;()\[\]{}<>]*)")


def no_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part ("/home/me/models/tiny" -> "tiny")."""
    return _PATH.sub(lambda m: m.group(1) or "…", text)


def is_anthropic(path: str) -> bool:
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


class ApiError(Exception):
    """A request the server refuses: its HTTP status and one line that says what and where."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self) -> dict[str, Any]:
        kind = ANTHROPIC_TYPES.get(self.status, "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": self.message}}

    def response(self, path: str = "") -> JSONResponse:
        """The error as JSON: Anthropic's shape on its routes, OpenAI's everywhere else."""
        body = self.anthropic_body() if is_anthropic(path) else self.body()
        return JSONResponse(body, status_code=self.status)


def refuse(error: ApiError, method: str, path: str, client: str) -> JSONResponse:
    """The error response, and its one line in the log."""
    log.warning("%s %s %s from %s: %s", error.status, method, path, client, error.message)
    return error.response(path)
