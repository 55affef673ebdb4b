"""Requests to the one shared engine: first come, first served, up to CONCURRENT_TURNS at a time.

The engine has one MLX thread, which decodes concurrent turns on different conversations in one
batch (engine/local/batcher.py). The server lets CONCURRENT_TURNS requests in at once and queues
the rest (FIFO), routes each to a conversation (conversations.py; one request at a time per
conversation), applies stop sequences, and records what it served.
"""

import asyncio
import hashlib
import json
import re
import time
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from app.chat.events import Delta, Reading
from app.chat.stream import EngineTurn, Streamed
from app.server.conversations import ConversationMap
from app.server.errors import ApiError, no_paths
from app.server.limits import MAX_WAITING
from app.server.requests import GenerationRequest
from engine.errors import ChinwagError
from engine.protocol import EngineAPI
from engine.types import ChatMessage, EngineStatus, FinishReason, ModelStatus, Role, ToolCall, TurnOrigin, TurnStats

RECENT_REQUESTS = 50  # what the window's Server panel lists
# As many as the engine decodes in one batch (engine/local/batcher.py's MAX_ROWS): more would
# wait there; here they wait in order, counted for the 429.
CONCURRENT_TURNS = 8
TOOL_REPLIES = 256  # replies with tool calls remembered, so a client's echo of them is the model's exact text


@dataclass(frozen=True)
class RequestRecord:
    """One served request, for the log and the window's list."""

    client: str
    model: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_s: float
    finish_reason: str
    waited_s: float


@dataclass(frozen=True)
class Started:
    """The first item of a generation: the request's turn has come and its model is loaded."""

    model: str  # its public id (public_ids)
    conversation: str


def _is_path(model_id: str) -> bool:
    return model_id.startswith(("/", "~", "\\")) or re.match(r"[A-Za-z]:[\\/]", model_id) is not None


def public_ids(ids: list[str]) -> dict[str, str]:
    """Each model id -> the id a client sees: a folder's absolute path becomes the folder's name
    (with a short digest if another id has that name), so no response shows where files are."""
    taken = {i for i in ids if not _is_path(i)}
    out = {}
    for i in ids:
        if _is_path(i):
            name = PurePath(i.rstrip("/\\")).name or "model"
            if name in taken:
                name = f"{name}-{hashlib.sha256(i.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
            taken.add(name)
            out[i] = name
        else:
            out[i] = i
    return out


@dataclass(frozen=True)
class Waiting:
    """Sent before the reply when the engine is busy with someone else's (the window's) reply."""

    reason: str


@dataclass(frozen=True)
class Outcome:
    """The end of a generation: why it ended and what it counted."""

    finish_reason: str  # OpenAI's: stop, length, tool_calls, or error
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    error: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # engine.types.ToolCall, when finish_reason is tool_calls
    stop_sequence: str = ""  # the stop sequence that ended the reply, if one did
    context_full: bool = False  # "length" because the context window is full, not max_tokens
    upstream: bool = False  # the model is a server's elsewhere: its failure is a bad gateway, not Chinwag's


def generation_failed(outcome: Outcome) -> ApiError:
    """A turn that failed: a server elsewhere's failure is a bad gateway (502), Chinwag's own a 500."""
    return ApiError(502 if outcome.upstream else 500, f"generation failed: {outcome.error}")


Generated = Started | Waiting | str | Outcome  # what ChatService.generate yields


async def collect(items: AsyncIterator[object]) -> tuple[str, Outcome]:
    """A whole (not streamed) reply: its text pieces joined, and its Outcome."""
    parts: list[str] = []
    async for item in items:
        if isinstance(item, Outcome):
            return "".join(parts), item
        if isinstance(item, str):
            parts.append(item)
    raise RuntimeError("a generation ended without its outcome")


class StopScanner:
    """Cuts the reply at the first stop sequence; holds back text that may be the start of one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.pending = ""
        self.hit = False
        self.matched = ""  # the stop sequence found

    def feed(self, text: str) -> str:
        if self.hit:  # the token or so generated before the stop took effect
            return ""
        if not self.stops:
            return text
        self.pending += text
        cuts = [(i, s) for i, s in ((self.pending.find(s), s) for s in self.stops) if i >= 0]
        if cuts:
            at, self.matched = min(cuts, key=lambda c: c[0])
            out, self.pending, self.hit = self.pending[:at], "", True
            return out
        keep = max((_held(self.pending, s) for s in self.stops), default=0)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(out) :]
        return out

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out


def _held(text: str, stop: str) -> int:
    """The length of the longest end of `text` that begins `stop` (and is not all of it)."""
    for n in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-n:]):
            return n
    return 0


def finish_reason(stats: TurnStats, stopped: bool) -> str:
    if stats.finish_reason == FinishReason.TOOL_CALLS and not stopped:
        return "tool_calls"
    if stats.finish_reason == FinishReason.CANCELLED and stats.error and not stopped:
        return "error"  # cut short by a server elsewhere (the client's own stop ends its request)
    if stopped or stats.finish_reason in (FinishReason.STOP, FinishReason.CANCELLED):
        return "stop"
    if stats.finish_reason in (FinishReason.LENGTH, FinishReason.CONTEXT):
        return "length"
    return "error"


@dataclass
class _Served:
    """One turn as the server follows it: the stop scanner, the text kept, what the record needs."""

    scanner: StopScanner
    behind: bool  # it waited for the window's reply
    began: bool = False  # the engine took it up
    called: float = field(default_factory=time.perf_counter)
    first_text: float = 0.0
    prompt_tokens: int = 0
    emitted: int = 0
    reply: list[str] = field(default_factory=list)
    ended: Streamed | None = None


class ChatService:
    def __init__(
        self, engine: EngineAPI, allow_switch: bool = False, conversations: ConversationMap | None = None
    ) -> None:
        self.engine = engine
        self.allow_switch = allow_switch
        self.conversations = conversations or ConversationMap()
        self.slots = asyncio.Semaphore(CONCURRENT_TURNS)  # FIFO: waiters are woken in the order they came
        self.turns: dict[str, asyncio.Lock] = {}  # a conversation generating now -> held while it does
        self._users: dict[str, int] = {}  # the requests holding or waiting for each of those locks
        self.waiting = 0
        self.recent: deque[RequestRecord] = deque(maxlen=RECENT_REQUESTS)
        self.listeners: list[Callable[[RequestRecord], None]] = []
        self.wait_listeners: list[Callable[[str], None]] = []  # a line while a request waits for the window, then ""
        self._forget_later: list[str] = []
        # The ids of a reply's tool calls -> the reply's text as generated (its tool-call markup included).
        self.tool_replies: OrderedDict[tuple[str, ...], str] = OrderedDict()
        self.real_ids: dict[str, str] = {}  # a public model id -> the engine's

    def written_back(self, messages: Sequence[ChatMessage]) -> tuple[ChatMessage, ...]:
        """Messages as the engine takes them: an assistant message's tool_calls back in its text.

        A reply this server made is its exact generated text (so its cache is reused); one it does
        not know (made elsewhere, or before a restart) is written in the Hermes form most tool
        templates read, `<tool_call>{"name": ..., "arguments": ...}</tool_call>`.
        """
        out = []
        for m in messages:
            if not m.tool_calls:
                out.append(m)
                continue
            text = self.tool_replies.get(tuple(c.id for c in m.tool_calls))
            if text is None:
                blocks = [
                    f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments or "{}"}}}\n</tool_call>'
                    for c in m.tool_calls
                ]
                text = "\n".join(([m.content] if m.content else []) + blocks)
            out.append(replace(m, content=text, tool_calls=()))
        return tuple(out)

    async def model_ids(self) -> list[str]:
        """The local models a client may name (as `chinwag models --json` ids, a folder by its name),
        the loaded one first."""
        models = await self.engine.list_models()
        ids = [m.id for m in models if m.source != "server" and m.status != ModelStatus.UNUSABLE]
        current = self.engine.current_model
        if current is not None:
            ids = [current.id] + [i for i in ids if i != current.id]
        shown = public_ids(ids)
        self.real_ids = {public: real for real, public in shown.items()}
        return [shown[i] for i in ids]

    def public_id(self, model_id: str) -> str:
        """The id a client sees for the engine's `model_id`."""
        for public, real in self.real_ids.items():
            if real == model_id:
                return public
        return public_ids([model_id])[model_id]

    async def _ensure_model(self, wanted: str) -> str:
        """The engine's id of the model `wanted` names (a public id, or "" for the loaded one), loaded."""
        current = self.engine.current_model
        if not self.real_ids:  # the public ids, worked out over every model once
            await self.model_ids()
        if current is not None and wanted and wanted in (current.id, self.public_id(current.id)):
            return current.id
        if not wanted:
            if current is None:
                raise ApiError(503, "no model is loaded: start the server with --model NAME")
            return current.id
        ids = await self.model_ids()
        real = self.real_ids.get(wanted, wanted if wanted in self.real_ids.values() else "")
        if not real:
            raise ApiError(404, f"model {wanted!r:.80} does not exist; models: {', '.join(ids)[:400]}", "model")
        if current is not None and real == current.id:
            return current.id
        if not self.allow_switch:
            loaded = self.public_id(current.id) if current else "none"
            raise ApiError(
                404, f"model {wanted!r:.80} is not loaded (loaded: {loaded}); start with --allow-switch", "model"
            )
        try:
            return (await self.engine.load_model(real)).id
        except ChinwagError as e:
            raise ApiError(400, no_paths(f"model {wanted}: {e}"), "model") from None

    async def generate(
        self, request: GenerationRequest, client: str = ""
    ) -> AsyncGenerator[Started | Waiting | str | Outcome, None]:
        """Yield Started, Waiting if the window is replying, the reply's text pieces, then one Outcome.

        Waits its turn (first its turn among requests, then the engine's one thread); ApiError before any text.
        """
        queued = time.perf_counter()
        await self._wait_turn()
        try:
            waited = time.perf_counter() - queued
            request = replace(request, messages=self.written_back(request.messages))
            model = await self._ensure_model(request.model)
            busy = () if request.pin else self.turns  # a pinned conversation waits for its running turn
            conv_id = self.conversations.route(model, request.messages, request.pin, busy)
            behind = self._behind()
            turn = self.turns.setdefault(conv_id, asyncio.Lock())
            self._users[conv_id] = self._users.get(conv_id, 0) + 1
            try:
                async with turn:
                    yield Started(self.public_id(model), conv_id)
                    async with aclosing(self._turn(conv_id, model, request, client, waited, behind)) as items:
                        async for item in items:
                            yield item
            finally:
                self._users[conv_id] -= 1
                if not self._users[conv_id]:  # nobody else waits for this conversation
                    del self._users[conv_id], self.turns[conv_id]
        finally:
            self.slots.release()

    @property
    def active(self) -> list[str]:
        """The conversations generating for this server now."""
        return list(self.turns)

    def _behind(self) -> bool:
        """Whether a reply generating now is someone else's on the same engine: the window's."""
        return not self.turns and self.engine.state.state == EngineStatus.GENERATING

    async def _turn(
        self, conv_id: str, model: str, request: GenerationRequest, client: str, waited: float, behind: bool
    ) -> AsyncGenerator[str | Outcome | Started | Waiting, None]:
        """One engine turn as the turn driver runs each of its turns (app/chat/stream.py): the client keeps
        the chat, runs its tools and sends them back, so nothing is written here. Waits behind the window's reply, cuts
        the reply at a stop sequence, and ends the engine's turn if the client goes away."""
        served = _Served(StopScanner(request.stop), behind=behind)
        if served.behind:  # no turn of ours generates, so a reply generating now is the window's
            line = f"a request from {client or 'a client'} waits for the window's reply"
            self._tell_waiting(line)
            yield Waiting(line)
        turn = EngineTurn(self.engine, conv_id, origin=TurnOrigin.SERVER)
        try:
            async with aclosing(turn.events(request.messages, request.params)) as events:
                async for event in events:
                    text = self._served(served, event, turn, bool(request.tools))
                    if text:
                        yield text
        finally:
            if served.behind and not served.began:
                self._tell_waiting("")
            if served.ended is None:  # the client went away or the server is stopping (the turn was stopped)
                # The cache holds the prompt (and what was emitted): the same request again reuses it.
                self._forget_later.extend(self.conversations.record(conv_id, model, request.messages))
                record = RequestRecord(
                    client, self.public_id(model), served.prompt_tokens, 0, served.emitted, 0.0, "cancelled", waited
                )
                self._publish(record)
        async for item in self._outcome(served, conv_id, model, request, client, waited):
            yield item

    def _served(self, served: "_Served", event: Reading | Delta | Streamed, turn: EngineTurn, tools: bool) -> str:
        """What of an event goes to the client now (with tools the reply goes whole: its calls are not text)."""
        if served.behind and not served.began:  # the engine has taken this turn up
            served.began = True
            self._tell_waiting("")
        if isinstance(event, Delta):
            served.emitted += 1
            served.first_text = served.first_text or time.perf_counter()
            text = served.scanner.feed(event.text)
            served.reply.append(text)
            if served.scanner.hit:
                turn.stop()  # within one token; the cache keeps what was emitted
            return "" if tools else text
        if isinstance(event, Reading):
            served.prompt_tokens = event.progress.prompt_tokens
        elif isinstance(event, Streamed):
            served.ended = event
        return ""

    async def _outcome(
        self, served: "_Served", conv_id: str, model: str, request: GenerationRequest, client: str, waited: float
    ) -> AsyncGenerator[str | Outcome, None]:
        """The end of a turn: the rest of its text, what the conversation map keeps, the record, the Outcome."""
        current = self.engine.current_model
        upstream = current is not None and bool(current.server)
        stats = _stats(served, upstream)
        scanner, reply = served.scanner, served.reply
        rest = scanner.flush()
        if rest:
            reply.append(rest)
        reason = finish_reason(stats, scanner.hit)
        calls = stats.tool_calls if reason == "tool_calls" else ()
        shown = stats.tool_text if calls else rest if not request.tools else "".join(reply)
        if shown:
            yield shown
        if calls:
            self._remember_calls(calls, "".join(reply))
        await self._record_seen(conv_id, model, request, stats, served)
        if served.behind and served.first_text:  # the engine's time to first token starts when the window's reply ended
            waited += max(0.0, served.first_text - served.called - stats.ttft_s)
        record = RequestRecord(
            client, self.public_id(model), stats.prompt_tokens, stats.reused_tokens, stats.generated_tokens,
            stats.ttft_s, reason, waited,
        )  # fmt: skip
        self._publish(record)
        yield Outcome(
            reason,
            stats.prompt_tokens,
            stats.reused_tokens,
            stats.generated_tokens,
            no_paths(stats.error),
            calls,
            scanner.matched,
            stats.finish_reason == FinishReason.CONTEXT and not scanner.hit,
            upstream,
        )

    def _remember_calls(self, calls: tuple[ToolCall, ...], text: str) -> None:
        """A reply's exact text under its calls' ids, so the client's echo of them continues the cache."""
        self.tool_replies[tuple(c.id for c in calls)] = text
        while len(self.tool_replies) > TOOL_REPLIES:
            self.tool_replies.popitem(last=False)

    async def _record_seen(
        self, conv_id: str, model: str, request: GenerationRequest, stats: TurnStats, served: "_Served"
    ) -> None:
        """What the conversation map keeps: a finished reply (or one cut at a stop sequence) is what the
        client sends back next; a stopped one is not."""
        ended = (FinishReason.STOP, FinishReason.LENGTH, FinishReason.CONTEXT, FinishReason.TOOL_CALLS)
        complete = served.scanner.hit or stats.finish_reason in ended
        seen = request.messages + ((ChatMessage(Role.ASSISTANT, "".join(served.reply)),) if complete else ())
        self._forget_later.extend(self.conversations.record(conv_id, model, seen))
        while self._forget_later:  # conversations past the map's limit: their caches go too
            await self.engine.forget(self._forget_later.pop())
        await asyncio.to_thread(self.conversations.save, self.conversations.dumps())

    async def _wait_turn(self) -> None:
        """Take a slot in this request's turn (429 past MAX_WAITING waiting); the caller releases it."""
        if self.waiting >= MAX_WAITING:
            raise ApiError(429, f"{self.waiting} requests are already waiting for the model; try again shortly")
        self.waiting += 1
        try:
            await self.slots.acquire()
        finally:
            self.waiting -= 1

    async def count_prompt(self, request: GenerationRequest) -> int:
        """The prompt tokens `request` would take on its model (template and tools included), in its turn."""
        await self._wait_turn()
        try:
            await self._ensure_model(request.model)
            try:
                counted = await self.engine.count_prompt(self.written_back(request.messages), request.params)
            except ChinwagError as e:
                raise ApiError(400, no_paths(str(e))) from None
            return counted.tokens
        finally:
            self.slots.release()

    def _tell_waiting(self, line: str) -> None:
        for listener in list(self.wait_listeners):
            listener(line)

    def _publish(self, record: RequestRecord) -> None:
        self.recent.append(record)
        for listener in list(self.listeners):
            listener(record)


def _stats(served: _Served, upstream: bool) -> TurnStats:
    """The turn's stats; a turn refused before it began is the client's error (400), or where a server
    elsewhere failed it (unreachable, its error, a malformed stream), a bad gateway (502)."""
    ended = served.ended
    assert ended is not None
    if ended.stats is None and ended.error:  # a prompt longer than the context...
        raise ApiError(502 if upstream and not ended.client_error else 400, no_paths(ended.error))
    if ended.stats is None:
        raise RuntimeError("the engine ended a turn without its stats")
    return ended.stats
