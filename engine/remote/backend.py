"""A model served elsewhere, behind the same chat API as a local one: the OpenAI chat-completions
stream (mlx_lm.server, exo, vLLM, SGLang, llama.cpp, Ollama, LM Studio) read incrementally with httpx.

Requests run on the network thread's own asyncio loop (engine/remote/network.py: no MLX there,
and no read on a front end's Qt loop); events come back to the caller's loop, so the UI thread
never waits. The history is sent byte-identical every turn (each reply exactly as the server
sent it), so the server's prefix cache serves every follow-up.
"""

import asyncio
import concurrent.futures
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from engine.backend import ChatEvent, StopSignal
from engine.context.prompt import check_messages
from engine.errors import ChinwagError, ContextOverflowError
from engine.remote import errors, network, sse
from engine.remote.errors import ServerError, chat_error, describe_http_error, headers_for, is_http_error, redact
from engine.remote.spec import RemoteTarget
from engine.types import (
    BackgroundPrefill,
    ChatMessage,
    FinishReason,
    ForkedCache,
    GenerationParams,
    MemoryReport,
    OutputKind,
    PrefillProgress,
    ResponseFormat,
    Role,
    TextDelta,
    TokenCount,
    TurnStats,
)

# Why a server's model has no read-ahead, cache copy or memory figures here.
NOT_HERE = "the model is served elsewhere"


def request_body(model: str, messages: list[dict[str, Any]], params: GenerationParams) -> dict[str, Any]:
    """Sampling settings mapped to the request; extras only when set, stable key order."""
    body = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_tokens": params.max_tokens,
    }
    if params.top_k:
        body["top_k"] = params.top_k
    if params.min_p:
        body["min_p"] = params.min_p
    if params.repetition_penalty and params.repetition_penalty != 1.0:
        body["repetition_penalty"] = params.repetition_penalty
    if params.seed is not None:
        body["seed"] = params.seed
    if params.tools:
        body["tools"] = [dict(t) for t in params.tools]
    if params.response_format is not None:
        body.update(response_fields(params.response_format))
    return body


def response_fields(fmt: ResponseFormat) -> dict[str, Any]:
    """A constrained reply asked of the server as OpenAI's API says it: the server enforces it."""
    if fmt.kind == OutputKind.JSON_OBJECT or (fmt.kind == OutputKind.JSON_SCHEMA and not fmt.schema):
        return {"response_format": {"type": "json_object"}}
    if fmt.kind == OutputKind.JSON_SCHEMA:
        schema = {"name": fmt.name or "reply", "schema": json.loads(fmt.schema), "strict": True}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    if len(fmt.tools) == 1:
        return {"tool_choice": {"type": "function", "function": {"name": fmt.tools[0]}}}
    return {"tool_choice": "required"}


class RemoteBackend:
    """Chats with one server model. One per loaded server model; lives on the caller's loop."""

    def __init__(self, target: RemoteTarget) -> None:
        self.target = target
        # Per conversation: the text shown for a reply -> the content the server sent.
        self._replies: dict[str, dict[str, str]] = {}

    @property
    def name(self) -> str:
        return self.target.server.name

    async def forget(self, conv_id: str) -> None:
        self._replies.pop(conv_id, None)

    # What the server does itself, or nobody here: each answered at once.

    async def prefill(
        self,
        conv_id: str,
        messages: list[ChatMessage],
        params: GenerationParams,
        progress: Callable[[PrefillProgress], None] | None = None,
    ) -> BackgroundPrefill:
        return BackgroundPrefill(0, 0, 0, False, NOT_HERE)  # it reads the prompt itself

    def fork(
        self, source_id: str, conv_id: str, messages: list[ChatMessage], params: GenerationParams
    ) -> Awaitable[ForkedCache]:
        return asyncio.sleep(0, ForkedCache(0, 0, NOT_HERE))  # the server keeps its own cache

    def adopt(self, draft_id: str, conv_id: str) -> Awaitable[bool]:
        return asyncio.sleep(0, False)  # no draft is read ahead, so there is nothing to adopt

    async def wait_background(self) -> BackgroundPrefill | None:
        return None  # no background work runs for a server's model

    def background_result(self) -> BackgroundPrefill | None:
        return None

    def cancel_background(self) -> None:
        pass

    async def count_tokens(self, text: str, params: GenerationParams) -> TokenCount:
        """An estimate: the server's tokenizer is not here (about 4 characters a token)."""
        limit = params.context_cap or self.target.info().context_length or 0
        return TokenCount((len(text) + 3) // 4, limit, exact=False)

    async def count_prompt(self, messages: list[ChatMessage], params: GenerationParams) -> TokenCount:
        text = "".join(m.content for m in check_messages(messages))
        return await self.count_tokens(text + (json.dumps(list(params.tools)) if params.tools else ""), params)

    async def memory_stats(self) -> MemoryReport:
        return MemoryReport(0, 0, 0, 0, 0, 0, 0, 0.0, 0.0)  # the server holds its caches

    def loaded_memory(self) -> tuple[int, int]:
        return 0, 0  # the weights are in the server's memory

    def wire_messages(self, conv_id: str, messages: list[ChatMessage]) -> list[dict[str, Any]]:
        """The history as the server sent it: each reply's content as received, without the
        Reasoning block shown for it. A reply from before this session (not remembered) loses a
        leading <think> block, which is where a server's separate reasoning was shown."""
        known = self._replies.get(conv_id, {})
        return [
            dataclasses.replace(m, content=known.get(m.content) or sse.without_reasoning(m.content)).to_openai()
            if m.role == Role.ASSISTANT
            else m.to_openai()
            for m in messages
        ]

    async def chat(
        self,
        conv_id: str,
        messages: list[ChatMessage],
        params: GenerationParams,
        stop: StopSignal,
        progress: Callable[[int, int], object] | None = PrefillProgress,
    ) -> AsyncIterator[ChatEvent]:
        """Yield TextDelta events (and `progress` events for keepalive comments if it makes any), then one TurnStats."""
        messages = check_messages(messages)
        params = params or GenerationParams()
        if params.continue_reply:  # an OpenAI server writes a new reply after an assistant message
            raise ChinwagError(f"a reply is continued only by a model on this computer, not one on server {self.name}")
        dropped = 0
        while True:
            wire = self.wire_messages(conv_id, messages)
            turn = sse.Turn()
            try:
                async for event in self._stream(wire, params, stop, progress, dropped, turn):
                    if isinstance(event, TurnStats):
                        self._remember(conv_id, messages, turn)
                    yield event
                return
            except ContextOverflowError:
                first = next((i for i, m in enumerate(messages[:-1]) if m.role != Role.SYSTEM), None)
                if first is None:
                    raise
                end = first + 1  # drop a whole turn (user + its reply), as local chats do
                while end < len(messages) - 1 and messages[end].role == Role.ASSISTANT:
                    end += 1
                dropped += end - first
                del messages[first:end]

    def _remember(self, conv_id: str, messages: list[ChatMessage], turn: sse.Turn) -> None:
        """Keep shown -> received for the replies still in the history, and this one."""
        keep = {m.content for m in messages if m.role == Role.ASSISTANT}
        known = {k: v for k, v in self._replies.get(conv_id, {}).items() if k in keep}
        known["".join(turn.shown)] = "".join(turn.content)
        self._replies[conv_id] = known

    async def _stream(
        self,
        wire: list[dict[str, Any]],
        params: GenerationParams,
        stop: StopSignal,
        progress: Callable[[int, int], object] | None,
        dropped: int,
        turn: sse.Turn,
    ) -> AsyncIterator[ChatEvent]:
        """One request: its events as they arrive, then the TurnStats (ChinwagError if there is no reply)."""
        server = self.target.server
        started = time.perf_counter()
        relay = network.Relay()
        lines = sse.EventLines(network.LIMITS.event_bytes)
        watch = network.Watch(errors.READ_TIMEOUT_S, errors.PROMPT_TIMEOUT_S)
        read = [0]  # prompt tokens the server says it has read: a keepalive counts as progress if it grew

        def clean(text: str) -> str:
            return redact(text, server.api_key)

        def on_line(line: str) -> bool:  # on the network thread; True ends the read
            counts = sse.keepalive(line)
            if counts is not None:
                if counts[0] > read[0]:
                    read[0] = counts[0]
                    watch.progress()
                event = progress(*counts) if progress is not None else None
                if event is not None:
                    relay.put(event)
            payload = lines.feed(line)
            if payload is None:
                return False
            pieces = turn.deltas
            done = sse.decode(payload, turn, relay.put, clean, lines.kind)
            if turn.deltas > pieces:
                watch.progress(replying=True)
                sse.check_length(turn, params.max_tokens)
            return done

        body = request_body(self.target.model, wire, params)
        headers = headers_for(server.api_key, server.name)
        request = network.post_lines(f"{server.url}/chat/completions", body, headers, on_line, watch)
        task = relay.run(request, stop)
        try:
            async for event in relay.events(stop):
                assert isinstance(event, (PrefillProgress, TextDelta, TurnStats))  # what sse.decode puts
                yield event
            error = self._outcome(task, stop, turn)
        finally:
            if not task.done():
                task.cancel()
        closing = turn.close_reasoning()
        if closing is not None:
            yield closing
        yield sse.stats(turn, started, dropped, error)

    def _outcome(self, task: concurrent.futures.Future[Any], stop: StopSignal, turn: sse.Turn) -> str:
        """Once the request is over: why the reply ended (turn.finish) and the TurnStats error line.

        Raises ChinwagError when there is no reply to keep.
        """
        name = self.target.server.name
        if stop.is_set() or task.cancelled():
            turn.finish = FinishReason.CANCELLED
            return ""
        if (e := task.exception()) is not None:
            return self._failure(e, turn)
        if unusable := sse.unusable_call(turn):  # kept, marked failed: nothing runs
            turn.finish = FinishReason.ERROR
            return redact(f"server {name}: {unusable}", self.target.server.api_key)
        if turn.finish:
            return ""
        if not turn.deltas:
            raise ChinwagError(f"server {name}: the stream ended without a reply")
        turn.finish = FinishReason.CANCELLED
        return f"server {name}: the stream ended before the reply finished"

    def _failure(self, e: BaseException, turn: sse.Turn) -> str:
        """A request that failed: a reply cut short is kept (its error line returned), else it raises."""
        server = self.target.server
        if isinstance(e, ServerError):
            raise chat_error(e, server, self.target.model)
        if isinstance(e, errors.PastMaxTokens):  # the reply is kept, cut where it should have ended
            error, finish = f"server {server.name}: {e}", FinishReason.LENGTH
        elif isinstance(e, errors.TimedOut):  # a reply cut by a silent server is kept, marked stopped
            error, finish = f"server {server.name}: {e}", FinishReason.CANCELLED
        elif isinstance(e, ChinwagError):  # malformed data, a bound passed, or an error event mid-stream
            error, finish = f"server {server.name}: {e}", FinishReason.ERROR
        elif not isinstance(e, Exception) or not is_http_error(e):
            raise e  # a bug, not the network
        else:  # a reply cut by a dropped connection is kept, marked stopped
            error, finish = f"server {server.name}: {describe_http_error(e, server)}", FinishReason.CANCELLED
        error = redact(error, server.api_key)
        if not turn.deltas:
            raise ChinwagError(error)
        turn.finish = finish
        return error
