"""OpenAI-style error objects: what a client sees when a request cannot be served."""

import logging

from starlette.responses import JSONResponse

log = logging.getLogger("chinwag.server")

# The OpenAI API's error type for each status a request can get.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(Exception):
    """A request the server refuses: its HTTP status and one line that says what and where."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def refuse(error: ApiError, method: str, path: str, client: str) -> JSONResponse:
    """The error response, and its one line in the log."""
    log.warning("%s %s %s from %s: %s", error.status, method, path, client, error.message)
    return error.response()
