"""The HTTP routes: OpenAI's /v1/models, /v1/chat/completions and /v1/completions (Starlette),
and the app that serves them with Anthropic's /v1/messages (anthropic.py)."""

import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.server.auth import check_key
from app.server.errors import ApiError, no_paths, refuse
from app.server.guard import Guard
from app.server.http import PIN_HEADER, ClientGone, ClosingStream, ServerConfig, client_of, first, unless_gone
from app.server.limits import read_json
from app.server.requests import GenerationRequest, chat_request, completion_request
from app.server.service import ChatService, Generated, Outcome, Waiting, collect, generation_failed
from engine.log import report_bug
from engine.types import ToolCall

log = logging.getLogger("chinwag.server")


GONE = Response(status_code=499)  # never sent: the client is gone (nginx's code, for the log)


def _usage(outcome: Outcome) -> dict[str, Any]:
    return {
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens},
    }


def _sse(data: dict[str, Any] | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}\n\n"


class Routes:
    def __init__(self, service: ChatService, config: ServerConfig) -> None:
        self.service = service
        self.config = config

    async def models(self, request: Request) -> Response:
        check_key(request.headers.get("authorization"), self.config.api_key)
        created = int(time.time())
        ids = await self.service.model_ids()
        data = [{"id": i, "object": "model", "created": created, "owned_by": "chinwag"} for i in ids]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def _generate(self, request: Request, chat: bool) -> Response:
        check_key(request.headers.get("authorization"), self.config.api_key)
        body = await read_json(request)
        pin = request.headers.get(PIN_HEADER, "")
        req = chat_request(body, pin) if chat else completion_request(body, pin)
        items = self.service.generate(req, client_of(request))
        try:  # waits its turn (a client that leaves the queue gives up its place)
            started = await unless_gone(request, first(items))
        except ClientGone:
            return GONE
        shape = _Shape(chat, req, started.model)
        if req.stream:
            return ClosingStream(shape.stream(items), media_type="text/event-stream")
        try:  # a whole reply: a client that goes away stops its turn, as a stream's does
            async with aclosing(items):
                text, outcome = await unless_gone(request, collect(items))
        except ClientGone:
            return GONE
        if outcome.finish_reason == "error":
            raise generation_failed(outcome)
        return JSONResponse(shape.whole(text, outcome))


class _Shape:
    """One response's JSON objects, chat or completion, whole or as stream chunks."""

    def __init__(self, chat: bool, req: GenerationRequest, model: str) -> None:
        self.chat, self.req, self.model = chat, req, model
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.kind = "chat.completion" if chat else "text_completion"

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, outcome: Outcome) -> dict[str, Any]:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text or (None if outcome.tool_calls else "")}
            if outcome.tool_calls:
                message["tool_calls"] = [c.to_openai() for c in outcome.tool_calls]
            choice = {"index": 0, "message": message, "finish_reason": outcome.finish_reason, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "finish_reason": outcome.finish_reason, "logprobs": None}
        return {**self._head(self.kind), "choices": [choice], "usage": _usage(outcome)}

    def _chunk(self, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if role:
                delta["role"] = "assistant"
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return {**self._head(self.kind), "choices": [choice]}

    def _tool_chunk(self, calls: Sequence[ToolCall]) -> dict[str, Any]:
        """The calls as one delta (OpenAI streams them in pieces; clients join pieces by index)."""
        delta = {"tool_calls": [{"index": i, **c.to_openai()} for i, c in enumerate(calls)]}
        choice = {"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}
        return {**self._head("chat.completion.chunk"), "choices": [choice]}

    async def stream(self, items: AsyncGenerator[Generated, None]) -> AsyncIterator[str]:
        """The SSE events of a reply; a failed turn (or a bug mid-stream) still ends with an error
        event, a chunk with its finish_reason, and [DONE]."""
        async with aclosing(items):
            if self.chat:
                yield _sse(self._chunk("", None, role=True))
            try:
                async for event in self._events(items):
                    yield event
            except Exception as e:  # noqa: BLE001 - a bug: logged with its traceback, the stream still ends
                yield self._failed(no_paths(report_bug(e, "a streamed reply")))
                yield _sse(self._chunk(None, "error"))
            yield _sse("[DONE]")

    def _failed(self, error: str) -> str:
        return _sse(ApiError(500, f"generation failed: {error}").body())

    async def _events(self, items: AsyncGenerator[Generated, None]) -> AsyncIterator[str]:
        async for item in items:
            if isinstance(item, Waiting):  # an SSE comment: clients skip it, a person reading the stream sees why
                yield f": {item.reason}\n\n"
            elif isinstance(item, str):
                yield _sse(self._chunk(item, None))
            elif isinstance(item, Outcome) and item.finish_reason == "error":
                yield _sse(generation_failed(item).body())
                yield _sse(self._chunk(None, "error"))
            elif isinstance(item, Outcome):
                if item.tool_calls:
                    yield _sse(self._tool_chunk(item.tool_calls))
                yield _sse(self._chunk(None, item.finish_reason))
                if self.req.include_usage:
                    kind = "chat.completion.chunk" if self.chat else self.kind
                    yield _sse({**self._head(kind), "choices": [], "usage": _usage(item)})


def create_app(service: ChatService, config: ServerConfig) -> Starlette:
    """The Starlette app: the routes, errors in each wire's shape, only Host names that name this
    server (`config.port` is the port it listens on), CORS only for named origins, 403 for others."""
    from app.server.anthropic import AnthropicRoutes

    routes = Routes(service, config)
    anthropic = AnthropicRoutes(service, config)

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return refuse(exc, request.method, request.url.path, client_of(request))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
        return refuse(error, request.method, request.url.path, client_of(request))

    async def bug(request: Request, exc: Exception) -> Response:
        line = no_paths(report_bug(exc, f"the server ({request.method} {request.url.path})"))
        return ApiError(500, line).response(request.url.path)

    # Outermost first: a request that does not name this server, or comes from a page not allowed, goes no further.
    middleware = [Middleware(Guard, config.host, config.port, config.allowed_hosts, config.cors_origins)]
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "x-api-key", "anthropic-version", PIN_HEADER],
            )
        )
    return Starlette(
        routes=[
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat, methods=["POST"]),
            Route("/v1/completions", routes.completions, methods=["POST"]),
            Route("/v1/messages", anthropic.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
        ],
        middleware=middleware,
        exception_handlers={ApiError: api_error, HTTPException: http_error, Exception: bug},
    )
