"""One reply in the window, run by the turn driver (app/chat/turn.py): the window's adapter.

The driver writes the store and runs the tool loop; this turns its events into the controller's view
updates and the bridge's signals (Dangerzone style), asks each call with an ApprovalCard (unless its
policy decides), and keeps the task (qasync keeps none). Stop ends the engine's turn, a waiting card
or a running call; closing the window writes the calls without a result as stopped, then nothing more.
"""

import asyncio
from collections.abc import Awaitable
from typing import Any

from app.chat.events import Delta, Ended, Reading, TurnStarted
from app.chat.tool_events import Event, ToolRan, ToolRound
from app.chat.transcript import StoreTranscript, Transcript
from app.chat.turn import STOPPED_RESULT, Reply, Tools, TurnDriver
from app.core.store import MessageStatus
from app.tools import config
from app.tools.client import ToolHost, ToolSpec
from app.tools.loop import ToolStarted, stored_stats, tool_message
from app.tools.policy import Answer, Approvals
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import ChatMessage, GenerationParams, ToolCall, TurnOrigin


class WindowReply:
    """The reply under way in one chat (the controller's `turn`)."""

    def __init__(self, controller: Any, conv_id: str, host: ToolHost | None, system_prompt: str) -> None:
        c = self.controller = controller
        self.conv_id = conv_id
        self.phase = "engine"  # "engine" (a turn streams), "ask" (a card waits) or "call" (a tool runs)
        self.pending: list[ToolCall] = []  # the round's calls that have no result yet
        self.asking: tuple[ToolCall, ToolSpec, asyncio.Future[Answer]] | None = None  # while a card waits
        self.card: Any = None
        self.last_tool_id: int | None = None  # the last `tool` message written
        self.abandoned = False  # the window closed: nothing more is written or shown
        self.ended = False
        model = c.bridge.current_model
        transcript = StoreTranscript(c.store, conv_id, model.id if model else "", system_prompt, on_error=c.error.emit)
        self.driver = TurnDriver(
            c.bridge.engine, transcript, self._on_event, self._tools(host), conv_id, TurnOrigin.WINDOW
        )
        self.task: asyncio.Task[None] | None = None

    def _tools(self, host: ToolHost | None) -> Tools | None:
        if host is None:
            return None
        try:
            tools_config = config.load()
        except ChinwagError as e:  # the servers run; the file broke since: every call asks
            self.controller.error.emit(str(e))
            tools_config = config.ToolsConfig(())
        return Tools(host, Approvals(tools_config), self._ask, tools_config.max_rounds)

    # --- what the controller asks ---------------------------------------------------------

    def start(self, messages: list[ChatMessage], params: GenerationParams, msg_id: int) -> None:
        self._run(self.driver.reply(messages, params, msg_id=msg_id))

    def continue_reply(self, messages: list[ChatMessage], params: GenerationParams, msg_id: int, earlier: int) -> None:
        self._run(self.driver.continue_reply(messages, params, msg_id, earlier))

    def stop(self) -> bool:
        """Stop: the engine's turn, a waiting card or a running call. False: nothing was under way."""
        if self.ended:
            return False
        self.driver.stop()  # kept until the engine's turn begins, if it has not yet
        return True

    def save_now(self, msg_id: int, text: str) -> None:
        """The streaming message's text, written now (before an export, say)."""
        self.driver.transcript.grow(msg_id, text, now=True)

    def abandon(self) -> None:
        """The window closes: the calls without a result get the stopped one now; then nothing is written."""
        if self.task is None or self.task.done():
            return
        for call in self.pending:
            self.driver.transcript.tool(self.driver.stopped_run(call))
        self.pending = []
        self.abandoned = True
        self.driver.transcript = Transcript(self.conv_id)
        self.task.cancel()

    def reshow(self) -> None:
        """The chat was opened again while a card waits: the card is shown again."""
        if self.asking is not None:
            call, spec, future = self.asking
            self._show_card(call, spec, future)

    # --- the driver's side ------------------------------------------------------------------

    def _run(self, reply: Awaitable[Reply]) -> None:
        async def run() -> None:
            try:
                await reply
            except asyncio.CancelledError:
                if not self.abandoned:  # the engine closes: the driver wrote it as stopped
                    self._ended(Ended(MessageStatus.STOPPED, None))
                raise
            except ChinwagError as e:  # a round's message the store refused
                self._ended(Ended(MessageStatus.FAILED, None, str(e)))
            except Exception as e:  # noqa: BLE001 - a bug: its traceback to the log, one line to the user
                self._ended(Ended(MessageStatus.FAILED, None, report_bug(e, "a reply")))

        self.task = self.controller.bridge.run_turn(self.conv_id, run())

    def _on_event(self, ev: Event) -> None:
        if self.abandoned:
            return
        c = self.controller
        if isinstance(ev, Delta):
            if ev.text:
                c.bridge.delta.emit(self.conv_id, ev.text)
        elif isinstance(ev, Reading):
            c.bridge.prefillProgress.emit(self.conv_id, ev.progress)
        elif isinstance(ev, TurnStarted) and ev.round:
            self.phase = "engine"
            c.next_round(self.conv_id, ev.msg_id)  # after a round: the reply goes on below its results
        elif isinstance(ev, ToolRound):
            self._turn_ended(ev)
        elif isinstance(ev, ToolStarted):
            self._started(ev)
        elif isinstance(ev, ToolRan):
            self._ran(ev)
        elif isinstance(ev, Ended):
            self._ended(ev)

    def _turn_ended(self, ev: ToolRound) -> None:
        c = self.controller
        if c.tools is not None:
            c.tools.turn_ended(self.conv_id, ev.stats)
        self.pending = list(ev.stats.tool_calls)
        self.phase = "call"  # the calls run now (each asked first unless its policy says)
        c.end_round(self.conv_id, ev.stats)

    async def _ask(self, call: ToolCall, spec: ToolSpec) -> Answer:
        self.phase = "ask"
        self.card = None
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.asking = (call, spec, future)
        self._show_card(call, spec, future)
        try:
            return await future
        except asyncio.CancelledError:  # Stop while the card waits
            if self.card is not None:
                self.card.cancel()
            raise
        finally:
            self.asking = None
            self.phase = "call"

    def _show_card(self, call: ToolCall, spec: ToolSpec, future: "asyncio.Future[Answer]") -> None:
        c = self.controller
        gen = c.gen
        if gen is None or gen.conv_id != c.conv_id:
            return  # another chat is open: the card shows when this one is opened again
        card = c.view.add_approval(gen.msg_id, call, spec.server, spec.tool)
        if card is not None:
            self.card = card
            card.answered.connect(lambda answer: self._answered(future, answer))

    def _answered(self, future: "asyncio.Future[Answer]", answer: Answer) -> None:
        if not future.done():
            future.set_result(answer)
        self.controller.view.focus_composer()  # the card's buttons go: the focus returns to the composer

    def _started(self, ev: ToolStarted) -> None:
        self.phase = "call"
        if not ev.asked:  # allowed by its policy: shown all the same, without the question
            self.card = None
            self._show_card(ev.call, ev.spec, asyncio.get_running_loop().create_future())
            if self.card is not None:
                self.card.allowed_by_policy()
        if self.card is not None:
            self.card.set_running(True)

    def _ran(self, ev: ToolRan) -> None:
        """A call's result, written by the driver: shown if its chat is open."""
        if self.card is not None and self.card.running:
            if ev.run.result.text == STOPPED_RESULT:
                self.card.cancel()  # "stopped while it ran"
            else:
                self.card.set_running(False)
        self.pending = [call for call in self.pending if call.id != ev.run.call.id]
        c = self.controller
        if ev.msg_id is None:
            return
        self.last_tool_id = ev.msg_id
        if self.conv_id == c.conv_id:
            c.view.add_tool_result(ev.msg_id, ev.run.result.text, stored_stats(tool_message(ev.run), ev.run))

    def _ended(self, ev: Ended) -> None:
        if self.ended:
            return
        self.ended = True
        c = self.controller
        if self.card is not None and self.card.running:
            self.card.cancel()
        if c.tools is not None and ev.stats is not None and not ev.note:
            c.tools.turn_ended(self.conv_id, ev.stats)
        if self.task is not None:
            c.bridge.turn_done(self.conv_id, self.task)
        if not ev.note:
            c.end(self.conv_id, ev.status, ev.stats, ev.error)
            return
        if self.last_tool_id is not None and self.conv_id == c.conv_id:
            c.view.set_tool_note(self.last_tool_id, ev.note)
        c.end_tool_reply(self.conv_id, ev.status)
