"""Anthropic's Messages API: POST /v1/messages (whole or streamed) and /v1/messages/count_tokens.

The same ChatService as the OpenAI routes (the queue, the per-conversation caches, stop sequences,
tool calls parsed by the model's own parser, a client that goes away), in Anthropic's wire format:
content blocks, `stop_reason`, `usage` with `cache_read_input_tokens`, the documented stream events
(message_start, content_block_start/delta/stop, message_delta, message_stop), errors as
{"type": "error", "error": {"type", "message"}} (errors.py picks the shape by path).
"""

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.server.anthropic_requests import messages_request
from app.server.auth import check_key
from app.server.errors import ApiError, no_paths
from app.server.http import PIN_HEADER, ClientGone, ClosingStream, ServerConfig, client_of, first, unless_gone
from app.server.limits import read_json
from app.server.requests import GenerationRequest
from app.server.service import ChatService, Generated, Outcome, Waiting, collect, generation_failed
from engine.log import report_bug
from engine.types import ToolCall


def stop_reason(outcome: Outcome) -> str:
    """Anthropic's stop_reason for how the reply ended."""
    if outcome.finish_reason == "tool_calls":
        return "tool_use"
    if outcome.finish_reason == "length":
        return "model_context_window_exceeded" if outcome.context_full else "max_tokens"
    return "stop_sequence" if outcome.stop_sequence else "end_turn"


def usage(outcome: Outcome | None) -> dict[str, Any]:
    """input_tokens: the prompt tokens computed; cache_read_input_tokens: those the cache supplied."""
    if outcome is None:
        return {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    return {
        "input_tokens": outcome.prompt_tokens - outcome.cached_tokens,
        "output_tokens": outcome.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": outcome.cached_tokens,
    }


def tool_use(call: ToolCall) -> dict[str, Any]:
    arguments = json.loads(call.arguments or "{}")
    # Anthropic's input is an object; a model that wrote other JSON gets it under "value".
    return {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {"value": arguments},
    }


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data}, ensure_ascii=False)}\n\n"


class _Message:
    """One reply's JSON, whole or as stream events."""

    def __init__(self, req: GenerationRequest, model: str) -> None:
        self.req, self.model = req, model
        self.id = "msg_" + uuid.uuid4().hex[:24]

    def head(self, outcome: Outcome | None, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason(outcome) if outcome else None,
            "stop_sequence": (outcome.stop_sequence or None) if outcome else None,
            "usage": usage(outcome),
        }

    def whole(self, text: str, outcome: Outcome) -> dict[str, Any]:
        content = ([{"type": "text", "text": text}] if text else []) + [tool_use(c) for c in outcome.tool_calls]
        return self.head(outcome, content)

    async def stream(self, items: AsyncGenerator[Generated, None]) -> AsyncIterator[str]:
        """The documented events; a failed turn (or a bug mid-stream) ends with an `error` event."""
        async with aclosing(items):
            yield _event("message_start", {"message": self.head(None, [])})
            try:
                async for event in self._events(items):
                    yield event
            except Exception as e:  # noqa: BLE001 - a bug: logged with its traceback, the stream still ends
                yield self._failed(no_paths(report_bug(e, "a streamed reply")))

    def _failed(self, error: str) -> str:
        return _event("error", ApiError(500, f"generation failed: {error}").anthropic_body())

    async def _events(self, items: AsyncGenerator[Generated, None]) -> AsyncIterator[str]:
        index, text_open = 0, False
        async for item in items:
            if isinstance(item, Waiting):  # an SSE comment: clients skip it, a person reading the stream sees why
                yield f": {item.reason}\n\n"
            elif isinstance(item, str):
                if not text_open:
                    text_open = True
                    yield _event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                yield _event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": item}})
            elif isinstance(item, Outcome):
                if item.finish_reason == "error":
                    yield _event("error", generation_failed(item).anthropic_body())
                    return
                if text_open:
                    yield _event("content_block_stop", {"index": index})
                    index += 1
                for call in item.tool_calls:
                    block = tool_use(call)
                    yield _event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
                    yield _event("content_block_delta", {"index": index, "delta": delta})
                    yield _event("content_block_stop", {"index": index})
                    index += 1
                end = {"stop_reason": stop_reason(item), "stop_sequence": item.stop_sequence or None}
                yield _event("message_delta", {"delta": end, "usage": usage(item)})
                yield _event("message_stop", {})


def _key(request: Request) -> str | None:
    """The key as Anthropic's clients send it: `x-api-key`, or `Authorization: Bearer`."""
    x_key = request.headers.get("x-api-key")
    return request.headers.get("authorization") or (f"Bearer {x_key}" if x_key is not None else None)


class AnthropicRoutes:
    def __init__(self, service: ChatService, config: ServerConfig) -> None:
        self.service = service
        self.config = config

    async def _request(self, request: Request, counting: bool = False) -> GenerationRequest:
        check_key(_key(request), self.config.api_key)
        body = await read_json(request)
        return messages_request(body, request.headers.get(PIN_HEADER, ""), counting)

    async def messages(self, request: Request) -> Response:
        req = await self._request(request)
        items = self.service.generate(req, client_of(request))
        try:  # waits its turn (a client that leaves the queue gives up its place)
            started = await unless_gone(request, first(items))
        except ClientGone:
            return Response(status_code=499)
        shape = _Message(req, started.model)
        if req.stream:
            return ClosingStream(shape.stream(items), media_type="text/event-stream")
        try:
            async with aclosing(items):
                text, outcome = await unless_gone(request, collect(items))
        except ClientGone:
            return Response(status_code=499)
        if outcome.finish_reason == "error":
            raise generation_failed(outcome)
        return JSONResponse(shape.whole(text, outcome))

    async def count_tokens(self, request: Request) -> Response:
        req = await self._request(request, counting=True)
        try:
            tokens = await unless_gone(request, self.service.count_prompt(req))
        except ClientGone:
            return Response(status_code=499)
        return JSONResponse({"input_tokens": tokens})
