"""The turn driver: one reply from the user's message to the saved answer, for every front end.

    send(history, question, documents)
      -> documents planned (app/documents/turn.py prepare) -> the user's message written
      -> reply(): engine turn (streamed, written as it grows)
           -> tool calls? the round written; each call asked (ask), run, its result written; again
      -> the last message written with its status and stats; Ended

The engine gets typed ChatMessage lists (as OpenAI-shaped dicts until every backend takes them).
`stop()` ends the engine's turn, a waiting question or a running call; a cancelled task (Ctrl+C,
a window that closes) writes what was generated as stopped. No Qt: front ends follow the events.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.chat.events import Ended, Planned, TurnStarted
from app.chat.stream import EngineTurn, Streamed
from app.chat.tool_events import ApprovalNeeded, Event, ToolRan, ToolRound
from app.chat.transcript import Transcript
from app.core.attachments import StoredAttachment
from app.core.document_block import Attachment
from app.core.store import LAST, MessageStatus
from app.core.turns import status_of
from app.documents.retrieval import Index
from app.documents.turn import prepare
from app.tools.client import ToolHost, ToolResult, ToolSpec
from app.tools.loop import RoundLimit, ToolRun, ToolStarted, run_call, with_tools
from app.tools.policy import Answer, Approvals
from engine.protocol import EngineAPI
from engine.types import (
    ChatMessage,
    FinishReason,
    GenerationParams,
    Role,
    ToolCall,
    TurnOrigin,
    TurnStats,
)

log = logging.getLogger(__name__)

Ask = Callable[[ToolCall, ToolSpec], Awaitable[Answer]]
Listener = Callable[[Event], None]
STOPPED_RESULT = "error: the user stopped the reply before this call finished"
STOPPED_NOTE = "Stopped."


@dataclass
class Tools:
    """A chat's tools: the running servers, who decides each call, the question for the user."""

    host: ToolHost
    approvals: Approvals
    ask: Ask
    max_rounds: int


@dataclass
class Reply:
    """What a turn added to the chat (the user's message, tool rounds, the answer) and how it ended."""

    added: list[ChatMessage] = field(default_factory=list)
    stats: TurnStats | None = None  # the last engine turn's
    status: str = MessageStatus.COMPLETE
    error: str = ""
    msg_id: int | None = None  # the reply's last assistant message in the store


class TurnDriver:
    """The turns of one chat: `conv_id` is the engine's conversation (a draft's id until the chat is saved)."""

    def __init__(
        self,
        engine: EngineAPI,
        transcript: Transcript,
        on_event: Listener = lambda event: None,
        tools: Tools | None = None,
        conv_id: str = "",
        origin: TurnOrigin = TurnOrigin.SCRIPT,
    ) -> None:
        self.engine, self.transcript, self.on_event, self.tools = engine, transcript, on_event, tools
        self.origin = origin  # announced with every engine turn (the window follows other front ends' turns)
        self.conv_id = conv_id or transcript.conv_id
        self._engine_turn: EngineTurn | None = None  # the engine turn under way
        self._stop_wanted = False
        self._waiting: asyncio.Future[ToolRun] | None = None  # a question or a call under way (stop cancels it)

    # --- what front ends call -------------------------------------------------------------

    async def send(
        self,
        history: Sequence[ChatMessage],
        question: str,
        params: GenerationParams,
        documents: Sequence[Attachment] = (),
        indexes: list[Index] | None = None,
        parent_id: Any = LAST,
    ) -> Reply:
        """The user's message (with its documents) written, then the reply to it."""
        content, stored = question, list[StoredAttachment]()
        if documents or indexes:
            planned = await prepare(self.engine, list(history), question, list(documents), params, indexes)
            self.on_event(Planned(tuple(planned.notes), tuple(planned.references), planned.summary))
            content, stored = planned.content, planned.stored({d.sha256: d.text for d in documents})  # whole texts kept
        draft = self.conv_id
        self.conv_id = self.transcript.user(question, stored, parent_id) or draft  # written before the engine sees it
        if draft and draft != self.conv_id:
            await self.engine.adopt(draft, self.conv_id)  # the documents read ahead become this chat's cache
        user = ChatMessage(Role.USER, content)
        reply = await self.reply([*history, user], params)
        reply.added.insert(0, user)
        return reply

    async def reply(
        self,
        messages: Sequence[ChatMessage],
        params: GenerationParams,
        parent_id: Any = LAST,
        msg_id: int | None = None,
    ) -> Reply:
        """The reply to `messages`: engine turns and tool rounds until it answers, is stopped or fails.
        `msg_id`: its first message, already written (the window shows it before the engine starts)."""
        try:
            return await self._reply(messages, params, parent_id, msg_id)
        finally:
            self._stop_wanted = False  # a Stop that came before the engine began was kept until now

    async def _reply(
        self, messages: Sequence[ChatMessage], params: GenerationParams, parent_id: Any, msg_id: int | None
    ) -> Reply:
        params = with_tools(params, self.tools.host) if self.tools is not None else params
        out, rounds, last_tool = Reply(), 0, None
        while True:
            if rounds or msg_id is None:
                msg_id = self.transcript.begin(parent_id if rounds == 0 else LAST)
            self.on_event(TurnStarted(self.conv_id, msg_id, rounds))
            streamed = await self._stream(msg_id, [*messages, *out.added], params)
            out.stats = streamed.stats
            calls = self._calls(streamed.stats)
            if not calls:
                return self._end(out, msg_id, streamed)
            self.transcript.round(msg_id, streamed.text, calls)
            self.on_event(ToolRound(msg_id, streamed.text, calls))
            out.added.append(ChatMessage(Role.ASSISTANT, streamed.text, calls.tool_calls))
            last_tool, stopped = await self._run_calls(calls.tool_calls, out)
            rounds += 1
            note = STOPPED_NOTE if stopped else self._round_limit(rounds)
            if note:
                self.transcript.note(last_tool, note)
                out.status = MessageStatus.STOPPED if stopped else MessageStatus.COMPLETE
                self.on_event(Ended(out.status, out.stats, note=note))
                return out

    async def continue_reply(
        self, messages: Sequence[ChatMessage], params: GenerationParams, msg_id: int | None, earlier_tokens: int
    ) -> Reply:
        """Write on from the end of the last reply (cut at max tokens), in the same message; the
        Reply's one added message is that message, whole."""
        params = with_tools(params, self.tools.host) if self.tools is not None else params  # the prompt that wrote it
        if msg_id is not None:
            self.transcript.extend(msg_id)
        self.on_event(TurnStarted(self.conv_id, msg_id, 0))
        try:
            streamed = await self._stream(msg_id, messages, replace(params, continue_reply=True), messages[-1].content)
        finally:
            self._stop_wanted = False
        return self._end(Reply(stats=streamed.stats), msg_id, streamed, earlier_tokens)

    def stop(self) -> bool:
        """Stop the reply: the engine's turn, or a question or call waiting; a reply asked for whose
        engine turn has not begun stops as it begins. False: no engine turn, question or call was under way."""
        self._stop_wanted = True
        if self._waiting is not None and not self._waiting.done():
            self._waiting.cancel()
            return True
        return self._engine_turn is not None and self._engine_turn.stop()

    # --- one engine turn ------------------------------------------------------------------

    async def _stream(
        self, msg_id: int | None, messages: Sequence[ChatMessage], params: GenerationParams, text: str = ""
    ) -> Streamed:
        """One engine turn (stream.py), streamed to the listener and written as it grows."""
        turn = self._engine_turn = EngineTurn(self.engine, self.conv_id, self.on_event, self._stop_wanted, self.origin)
        try:
            return await turn.run(
                messages,
                params,
                text,
                grow=lambda so_far: self.transcript.grow(msg_id, so_far),
                kept=lambda so_far, cancelled: self.transcript.end(
                    msg_id, so_far, MessageStatus.STOPPED if cancelled else MessageStatus.FAILED, None
                ),
            )
        finally:
            self._engine_turn = None

    def _calls(self, stats: TurnStats | None) -> TurnStats | None:
        """The stats of a turn that ended with calls the driver runs (None: the reply ends here)."""
        if stats is None or self.tools is None or stats.finish_reason != FinishReason.TOOL_CALLS:
            return None
        return stats if stats.tool_calls and not self._stop_wanted else None

    def _end(self, out: Reply, msg_id: int | None, streamed: Streamed, earlier_tokens: int = 0) -> Reply:
        stats = streamed.stats
        if stats is not None:
            out.status, out.error = status_of(stats), stats.error
        else:
            out.status = MessageStatus.FAILED if streamed.error else MessageStatus.STOPPED
            out.error = streamed.error
        self.transcript.end(msg_id, streamed.text, out.status, stats, earlier_tokens)
        out.msg_id = msg_id
        out.added.append(ChatMessage(Role.ASSISTANT, streamed.text))
        self.on_event(Ended(out.status, stats, out.error))
        return out

    # --- tool rounds ----------------------------------------------------------------------

    async def _run_calls(self, calls: Sequence[ToolCall], out: Reply) -> tuple[int | None, bool]:
        """Every call of the round, asked and run in order; each gets a result, even once stopped.
        Returns the last result's message id and whether the user stopped the round."""
        last, stopped = None, False
        for call in calls:
            run = self.stopped_run(call) if stopped else await self._run_call(call)
            stopped = stopped or run is None
            run = run or self.stopped_run(call)
            last = self.transcript.tool(run)
            self.on_event(ToolRan(last, run))
            out.added.append(ChatMessage(Role.TOOL, run.result.text, tool_call_id=call.id, name=call.name))
        return last, stopped

    async def _run_call(self, call: ToolCall) -> ToolRun | None:
        """One call: asked (unless its policy decides) and run; None if the user stopped it."""
        assert self.tools is not None
        tools = self.tools

        async def ask(c: ToolCall, spec: ToolSpec) -> Answer:
            self.on_event(ApprovalNeeded(c, spec))
            return await tools.ask(c, spec)

        def show(event: object) -> None:
            if isinstance(event, ToolStarted):
                self.on_event(event)

        self._waiting = asyncio.ensure_future(run_call(tools.host, tools.approvals, call, ask, show))
        try:
            return await self._waiting
        except asyncio.CancelledError:
            if not self._stop_wanted:
                raise  # our own task was cancelled (the window closes), not only the call
            return None
        finally:
            self._waiting = None

    def stopped_run(self, call: ToolCall) -> ToolRun:
        """A call that never ran because the user stopped the reply: its result says so."""
        spec = self.tools.host.find(call.name) if self.tools is not None else None
        return ToolRun(call, spec.server if spec else "", ToolResult(STOPPED_RESULT, True), False)

    def _round_limit(self, rounds: int) -> str:
        """The note that ends a reply at its round limit ("" below it)."""
        if self.tools is None or rounds < self.tools.max_rounds:
            return ""
        text = RoundLimit(rounds).text
        return text[:1].upper() + text[1:] + "."
