"""A model served elsewhere, behind the same chat API as a local one: the OpenAI chat-completions
stream (mlx_lm.server, exo, vLLM, SGLang, llama.cpp, Ollama, LM Studio) read incrementally with httpx.

Requests run on one network thread's own asyncio loop (no MLX there, and no read on a front
end's Qt loop); events come back to the caller's loop, so the UI thread never waits. The
history is sent byte-identical every turn (each reply exactly as the server sent it), so the
server's prefix cache serves every follow-up.
"""

import asyncio
import concurrent.futures
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from engine.context.prompt import check_messages
from engine.errors import ChinwagError, ContextOverflowError
from engine.remote import servers
from engine.types import FinishReason, GenerationParams, ModelInfo, TextDelta, TurnStats

CONNECT_TIMEOUT_S = 10.0
# A prefill of a long history on a big model can take minutes; mlx_lm.server sends keepalive
# comments meanwhile, and any byte resets this.
READ_TIMEOUT_S = 300.0
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_KEEPALIVE = re.compile(r"keepalive\s+(\d+)\s*/\s*(\d+)")
_OVERFLOW = re.compile(
    r"context (length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? the (available |model's )?context",
    re.I,
)
# The server's finish_reason -> ours; anything else that ends a reply normally is a stop.
FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "tool_calls": FinishReason.TOOL_CALLS}


@dataclass(frozen=True)
class RemoteTarget:
    """One model on one server."""

    server: servers.Server
    model: str
    spec: str = ""  # what the user asked for; the ModelInfo id

    def info(self) -> ModelInfo:
        return servers.model_info(self.server, self.model, self.spec)


# --- specs: URL, URL#MODEL, NAME/MODEL -----------------------------------------------------


def is_remote_spec(spec: str) -> bool:
    spec = str(spec).strip()
    if spec.startswith(("http://", "https://")):
        return True
    name = spec.split("/", 1)[0]
    return "/" in spec and bool(name) and servers.get_server(name) is not None


def resolve(spec: str) -> RemoteTarget | None:
    """The server model a spec names, or None for a local spec. Asks the server for its models."""
    spec = str(spec).strip()
    if spec.startswith(("http://", "https://")):
        url, _, model = spec.partition("#")
        base = servers.normalize_url(url)
        # A saved server's URL gets its name and API key.
        server = next((s for s in servers.list_servers() if s.url == base), None) or servers.Server(
            servers.host_label(base), base
        )
    elif is_remote_spec(spec):
        name, model = spec.split("/", 1)
        server = servers.get_server(name)
    else:
        return None
    try:
        available = servers.fetch_model_ids(server, timeout=CONNECT_TIMEOUT_S)
    except servers.NoModelList:
        if not model:
            raise
        available = [model]
    if not model:
        model = available[0]
    elif model not in available and model != servers.DEFAULT_MODEL and available != [servers.DEFAULT_MODEL]:
        raise ChinwagError(f"server {server.name} has no model '{model}'; it serves: {', '.join(available[:8])}")
    canonical = f"{url.strip()}#{model}" if spec.startswith(("http://", "https://")) else f"{server.name}/{model}"
    return RemoteTarget(server, model, canonical)


# --- errors: one line, naming the server, never the key ------------------------------------


def headers_for(api_key: str) -> dict:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def server_message(body: bytes) -> str:
    """The message in an error body: {"error": "..."}, {"error": {"message": ...}}, {"detail": ...}."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("detail") or json.dumps(value)
            if value:
                return " ".join(str(value).split())[:300]
    return " ".join(text.split())[:200]


def response_error(status: int, body: bytes) -> str:
    message = server_message(body)
    if status in (401, 403):
        what = "refused the API key" if status == 401 else "denied access"
        return f"{what} (HTTP {status}{': ' + message if message else ''}); check the server's API key"
    if status == 404 and message:
        return f"HTTP 404: {message} (unknown model?)"
    return f"HTTP {status}" + (f": {message}" if message else " with no message")


def describe_http_error(e: Exception, server: servers.Server) -> str:
    import httpx

    where = servers.display_url(server.url)
    text = str(e)
    if isinstance(e, httpx.ConnectTimeout):
        return f"no answer from {where} (connection timed out)"
    if isinstance(e, httpx.ReadTimeout):
        return f"stopped sending for {READ_TIMEOUT_S:.0f} s (read timed out)"
    if isinstance(e, httpx.ConnectError):
        low = text.lower()
        if "ssl" in low or "certificate" in low or "tls" in low:
            return f"TLS error talking to {where}: {text[:160]}"
        if (
            "name or service not known" in low
            or "nodename nor servname" in low
            or "getaddrinfo" in low
            or "name resolution" in low
        ):
            return f"cannot resolve the host of {where} (DNS lookup failed)"
        if "refused" in low:
            return f"connection refused at {where} (is the server running?)"
        return f"cannot connect to {where}: {text[:160] or type(e).__name__}"
    if isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "closed the connection mid-reply"
    return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


class _ServerError(Exception):
    def __init__(self, status: int, body: bytes):
        self.status, self.body = status, body


# --- stop: thread-safe, and it interrupts a read that is waiting ----------------------------


class StopSignal:
    """Engine.stop() sets it from any thread; it cancels the running request at once."""

    def __init__(self):
        self._event = threading.Event()
        self._request: concurrent.futures.Future | None = None

    def watch(self, request: concurrent.futures.Future) -> None:
        self._request = request
        if self._event.is_set():
            request.cancel()

    def set(self) -> None:
        self._event.set()
        if self._request is not None:
            self._request.cancel()  # thread-safe: cancels the request's task on the network loop

    def is_set(self) -> bool:
        return self._event.is_set()


_network = None
_network_lock = threading.Lock()


def network_loop() -> asyncio.AbstractEventLoop:
    """One event loop on its own thread for every request: httpx runs on plain asyncio, and no
    read ever happens on a front end's (Qt) loop."""
    global _network
    with _network_lock:
        if _network is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="chinwag-network", daemon=True).start()
            _network = loop
    return _network


# --- the backend ---------------------------------------------------------------------------


def request_body(model: str, messages: list, params: GenerationParams) -> dict:
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
    return body


def tool_fields(m: dict) -> dict:
    """A message's tool-round fields as the OpenAI API has them (check_messages keeps role and content only)."""
    out = {}
    if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list) and m["tool_calls"]:
        out["tool_calls"] = m["tool_calls"]
    if m.get("role") == "tool":
        for key in ("tool_call_id", "name"):
            if isinstance(m.get(key), str):
                out[key] = m[key]
    return out


@dataclass
class _Turn:
    """What one streamed reply has gathered."""

    content: list = field(default_factory=list)  # exactly as received
    shown: list = field(default_factory=list)  # what the UI got (reasoning wrapped in <think>)
    in_reasoning: bool = False
    finish: str = ""
    usage: dict = field(default_factory=dict)
    first: float = 0.0
    last: float = 0.0
    deltas: int = 0
    tool_calls: dict = field(default_factory=dict)  # index -> {"id", "name", "arguments" (JSON text so far)}


class RemoteBackend:
    """Chats with one server model. One per loaded server model; lives on the caller's loop."""

    def __init__(self, target: RemoteTarget):
        self.target = target
        # Per conversation: the text shown for a reply -> the content the server sent.
        self._replies: dict = {}

    @property
    def name(self) -> str:
        return self.target.server.name

    def forget(self, conv_id: str) -> None:
        self._replies.pop(conv_id, None)

    def wire_messages(self, conv_id: str, messages: list) -> list:
        """The history as the server sent it: each reply's content as received, without the
        Reasoning block shown for it. A reply from before this session (not remembered) loses a
        leading <think> block, which is where a server's separate reasoning was shown."""
        known = self._replies.get(conv_id, {})
        return [
            {
                "role": "assistant",
                "content": known.get(m["content"]) or _without_reasoning(m["content"]),
                **tool_fields(m),
            }
            if m["role"] == "assistant"
            else m
            for m in messages
        ]

    async def chat(
        self,
        conv_id: str,
        messages,
        params: GenerationParams,
        stop: StopSignal,
        progress: Callable[[int, int], object] | None = None,
    ) -> AsyncIterator:
        """Yield TextDelta events (and progress events, if `progress` makes them), then one TurnStats."""
        extras = [tool_fields(m) if isinstance(m, dict) else {} for m in messages]
        messages = [dict(m, **x) for m, x in zip(check_messages(messages), extras)]
        params = params or GenerationParams()
        dropped = 0
        while True:
            wire = self.wire_messages(conv_id, messages)
            turn = _Turn()
            try:
                async for event in self._stream(wire, params, stop, progress, dropped, turn):
                    if isinstance(event, TurnStats):
                        self._remember(conv_id, messages, turn)
                    yield event
                return
            except ContextOverflowError:
                first = next((i for i, m in enumerate(messages[:-1]) if m["role"] != "system"), None)
                if first is None:
                    raise
                end = first + 1  # drop a whole turn (user + its reply), as local chats do
                while end < len(messages) - 1 and messages[end]["role"] == "assistant":
                    end += 1
                dropped += end - first
                del messages[first:end]

    def _remember(self, conv_id, messages, turn: _Turn):
        """Keep shown -> received for the replies still in the history, and this one."""
        keep = {m["content"] for m in messages if m["role"] == "assistant"}
        known = {k: v for k, v in self._replies.get(conv_id, {}).items() if k in keep}
        known["".join(turn.shown)] = "".join(turn.content)
        self._replies[conv_id] = known

    async def _stream(self, wire, params, stop, progress, dropped, turn: _Turn) -> AsyncIterator:
        import httpx

        server = self.target.server
        caller = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        started = time.perf_counter()
        done = object()

        def put(event):  # from the network thread to this loop
            try:
                caller.call_soon_threadsafe(queue.put_nowait, event)
            except RuntimeError:  # this loop has closed: nobody is listening
                pass

        async def read():
            timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=True) as client:
                async with client.stream(
                    "POST",
                    f"{server.url}/chat/completions",
                    json=request_body(self.target.model, wire, params),
                    headers=headers_for(server.api_key),
                ) as r:
                    if r.status_code != 200:
                        raise _ServerError(r.status_code, await r.aread())
                    data = []
                    async for line in r.aiter_lines():
                        if line.startswith(":"):
                            m = _KEEPALIVE.search(line)
                            if m and progress is not None:
                                event = progress(int(m.group(1)), int(m.group(2)))
                                if event is not None:
                                    put(event)
                        elif line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                        elif not line.strip() and data:
                            if self._dispatch("\n".join(data), turn, put):
                                return
                            data = []
                    if data:
                        self._dispatch("\n".join(data), turn, put)

        task = asyncio.run_coroutine_threadsafe(read(), network_loop())
        task.add_done_callback(lambda _t: put(done))
        stop.watch(task)
        error = ""
        try:
            while True:
                event = await queue.get()
                if event is done or stop.is_set():  # nothing after a stop, even if already received
                    break
                yield event
            if stop.is_set() or task.cancelled():
                turn.finish = FinishReason.CANCELLED
            elif (e := task.exception()) is not None:
                if isinstance(e, _ServerError):
                    message = response_error(e.status, e.body)
                    if e.status == 404:
                        message = f"unknown model '{self.target.model}' ({message.removesuffix(' (unknown model?)')})"
                    if e.status in (400, 413, 422) and _OVERFLOW.search(server_message(e.body)):
                        raise ContextOverflowError(f"server {server.name}: the history is too long: {message}")
                    raise ChinwagError(f"server {server.name}: {message}")
                if isinstance(e, ChinwagError):  # malformed data, or an error event mid-stream
                    error = f"server {server.name}: {e}"
                    if not turn.deltas:
                        raise ChinwagError(error)
                    turn.finish = FinishReason.ERROR
                elif not isinstance(e, Exception) or not _is_http_error(e):
                    raise e  # a bug, not the network
                else:
                    error = f"server {server.name}: {describe_http_error(e, server)}"
                    if not turn.deltas:
                        raise ChinwagError(error)
                    turn.finish = FinishReason.CANCELLED  # a reply cut by a dropped connection is kept, marked stopped
            elif not turn.finish:
                if not turn.deltas:
                    raise ChinwagError(f"server {server.name}: the stream ended without a reply")
                error = f"server {server.name}: the stream ended before the reply finished"
                turn.finish = FinishReason.CANCELLED
        finally:
            if not task.done():
                task.cancel()
        if turn.in_reasoning:
            yield self._show(turn, THINK_CLOSE)
        yield self._stats(turn, started, dropped, error)

    def _dispatch(self, payload: str, turn: _Turn, put: Callable) -> bool:
        """Handle one SSE event; True at [DONE]."""
        if payload.strip() == "[DONE]":
            return True
        try:
            event = json.loads(payload)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError:
            raise ChinwagError(f"sent malformed stream data: {payload[:80]!r}") from None
        if event.get("error"):
            raise ChinwagError(f"failed mid-reply: {server_message(json.dumps(event).encode())}")
        if isinstance(event.get("usage"), dict):
            turn.usage = event["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or choice.get("message") or {}
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                self._arrive(turn)
                if not turn.in_reasoning:
                    turn.in_reasoning = True
                    reasoning = THINK_OPEN + reasoning
                put(self._show(turn, reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._arrive(turn)
                turn.content.append(content)
                shown = content
                if turn.in_reasoning:
                    turn.in_reasoning = False
                    shown = THINK_CLOSE + content
                put(self._show(turn, shown))
            for call in delta.get("tool_calls") or []:
                self._tool_delta(turn, call)
            if choice.get("finish_reason"):
                turn.finish = FINISH.get(choice["finish_reason"], FinishReason.STOP)
        return False

    def _tool_delta(self, turn: _Turn, call) -> None:
        """One streamed piece of a tool call: its id and name come once, its arguments in pieces."""
        if not isinstance(call, dict):
            return
        self._arrive(turn)
        index = call.get("index", len(turn.tool_calls))
        known = turn.tool_calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        function = call.get("function") or {}
        if isinstance(call.get("id"), str) and call["id"]:
            known["id"] = call["id"]
        if isinstance(function.get("name"), str) and function["name"]:
            known["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            known["arguments"] += arguments
        elif isinstance(arguments, dict):
            known["arguments"] = json.dumps(arguments)

    @staticmethod
    def _arrive(turn: _Turn):
        now = time.perf_counter()
        turn.first = turn.first or now
        turn.last = now
        turn.deltas += 1

    @staticmethod
    def _show(turn: _Turn, text: str) -> TextDelta:
        turn.shown.append(text)
        return TextDelta(text)

    def _stats(self, turn: _Turn, started: float, dropped: int, error: str) -> TurnStats:
        usage = turn.usage
        prompt = _int(usage.get("prompt_tokens"))
        generated = _int(usage.get("completion_tokens")) or turn.deltas
        details = usage.get("prompt_tokens_details") or {}
        cached = _int(details.get("cached_tokens") if isinstance(details, dict) else 0)
        ttft = (turn.first - started) if turn.first else 0.0
        span = turn.last - turn.first
        calls = _tool_calls(turn) if turn.finish not in (FinishReason.CANCELLED, FinishReason.ERROR) else ()
        return TurnStats(
            prompt_tokens=prompt,
            reused_tokens=cached,
            prefilled_tokens=max(0, prompt - cached),
            generated_tokens=generated,
            ttft_s=ttft,
            decode_tps=(generated - 1) / span if generated > 1 and span > 0 else 0.0,
            prefill_tps=(prompt - cached) / ttft if ttft > 0 else 0.0,
            kv_capacity=0,
            kv_offset=prompt + generated,
            kv_bytes=0,
            context_limit=0,
            finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason(turn.finish or FinishReason.STOP),
            dropped_messages=dropped,
            error=error,
            tool_calls=calls,
        )


def _tool_calls(turn: _Turn) -> tuple:
    """The streamed tool calls, complete ones only (arguments that are a JSON object)."""
    from engine.types import ToolCall

    out = []
    for index in sorted(turn.tool_calls, key=str):
        c = turn.tool_calls[index]
        try:
            arguments = json.loads(c["arguments"] or "{}")
        except ValueError:
            continue
        if c["name"] and isinstance(arguments, dict):
            out.append(ToolCall(c["id"] or f"call_{index}", c["name"], json.dumps(arguments, ensure_ascii=False)))
    return tuple(out)


def _without_reasoning(text: str) -> str:
    if text.startswith(THINK_OPEN) and THINK_CLOSE in text:
        return text[text.index(THINK_CLOSE) + len(THINK_CLOSE) :]
    return text


def _int(value) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _is_http_error(e: BaseException) -> bool:
    import httpx

    return isinstance(e, (httpx.HTTPError, httpx.StreamError, OSError))


def prefill_progress(done: int, total: int):
    """The engine's prefill progress event for a keepalive comment, when it has that type."""
    from engine import types

    event_type = getattr(types, "PrefillProgress", None)
    return None if event_type is None else event_type(done, total)
