"""One reply with tools in the window: the Qt-free loop of the terminal chat (app/tools/loop.py)
driven on the window's loop, with the controller's hooks for each round.

Each turn streams into its own assistant message (the controller's Generation); a turn that ends
with calls is saved as the round's message; each call waits for its ApprovalCard (unless its
policy says allow or deny), runs, and its result is saved as a `tool` message and shown as a
collapsed block; then the next turn streams below. Stop cancels a waiting card or a running call.
"""

import asyncio
import logging

from app.core.store import MessageStatus
from app.tools import config
from app.tools.client import ToolSpec
from app.tools.loop import RoundLimit, ToolRun, ToolStarted, stored_stats, tool_message
from app.tools.loop import reply as tool_reply
from app.tools.policy import Answer, Approvals
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import FinishReason, ToolCall

log = logging.getLogger(__name__)

STOPPED_RESULT = "error: the user stopped the reply before this call finished"


class ToolReply:
    """The reply with tools under way in one chat; `task` runs it (kept here: qasync keeps none)."""

    def __init__(self, controller, host, conv_id, messages: list, params):
        self.controller, self.host, self.conv_id = controller, host, conv_id
        self.phase = "engine"  # "engine" (a turn streams), "ask" (a card waits) or "call" (a tool runs)
        self.pending: list = []  # the round's calls that have no result yet
        self.asking: tuple[ToolCall, ToolSpec, asyncio.Future] | None = None  # (call, spec, future) while a card waits
        self.card = None
        self.last_tool_id = None  # the last `tool` message saved, and its stats
        self.last_tool_stats: dict = {}
        self.abandoned = False  # the window closed: write nothing more
        self.turns = 0
        self.task = asyncio.ensure_future(self._run(messages, params))

    # --- what the controller asks ---------------------------------------------------------

    def stop(self) -> bool:
        """Stop: a waiting card or a running call is cancelled here (True); a streaming turn is the engine's."""
        if self.task.done() or (self.phase == "engine" and self.controller.bridge.is_generating(self.conv_id)):
            return False
        self.task.cancel()
        return True

    def abandon(self) -> None:
        """The window closes: the calls without a result get the stopped one now (the store closes after)."""
        if self.task.done():
            return
        self._record_stopped()
        self.abandoned = True  # nothing more is written
        self.task.cancel()

    def _record_stopped(self) -> None:
        """Every call of the round gets a result, so the history the next reply reads stays whole."""
        pending, self.pending = self.pending, []
        for call in pending:
            spec = self.host.find(call.name)
            run = ToolRun(call, spec.server if spec else "", _stopped(), False)
            self._save(run)

    def reshow(self) -> None:
        """The chat was opened again while a card waits: the card is shown again."""
        if self.asking is not None:
            call, spec, future = self.asking
            self._show_card(call, spec, future)

    # --- the loop's callbacks -------------------------------------------------------------

    async def _turn(self, messages, params):
        c = self.controller
        self.turns += 1
        if self.turns > 1 and not c.next_round():  # after a round: the reply goes on below its results
            return "", None
        self.phase = "engine"
        stats = await c.bridge.chat(self.conv_id, messages, params)
        gen = c.gen
        text = gen.text if gen is not None and gen.conv_id == self.conv_id else ""
        if c.tools is not None:
            c.tools.turn_ended(self.conv_id, stats)
        self.pending = list(stats.tool_calls) if stats and stats.finish_reason == FinishReason.TOOL_CALLS else []
        if self.pending:
            self.phase = "call"  # the calls run now (each asked first unless its policy decides)
        return text, stats

    async def _ask(self, call, spec) -> Answer:
        self.phase = "ask"
        self.card = None
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.asking = (call, spec, future)
        self._show_card(call, spec, future)
        try:
            return await future
        finally:
            self.asking = None
            self.phase = "call"

    def _show_card(self, call, spec, future) -> None:
        c = self.controller
        gen = c.gen
        if gen is None or gen.conv_id != c.conv_id:
            return  # another chat is open: the card shows when this one is opened again
        card = c.view.add_approval(gen.msg_id, call, spec.server, spec.tool)
        if card is not None:
            self.card = card
            card.answered.connect(lambda answer: self._answered(future, answer))

    def _answered(self, future, answer) -> None:
        if not future.done():
            future.set_result(answer)
        self.controller.view.focus_composer()  # the card's buttons go: the focus returns to the composer

    def _show(self, event) -> None:
        if isinstance(event, ToolStarted):
            self.phase = "call"
            if not event.asked:  # allowed by its policy: shown all the same, without the question
                self.card = None
                future: asyncio.Future = asyncio.get_running_loop().create_future()
                self._show_card(event.call, event.spec, future)
                if self.card is not None:
                    self.card.allowed_by_policy()
            if self.card is not None:
                self.card.set_running(True)
        elif isinstance(event, ToolRun):
            if self.card is not None and self.card.running:
                self.card.set_running(False)
            self.pending = [call for call in self.pending if call.id != event.call.id]
            self._save(event)
            self.phase = "call"
        elif isinstance(event, RoundLimit):
            self._finish(MessageStatus.COMPLETE, event.text[:1].upper() + event.text[1:] + ".")

    def _save(self, run: ToolRun) -> None:
        """A call's result: saved as a `tool` message, and shown if its chat is open."""
        message = tool_message(run)
        stats = stored_stats(message, run)
        assert stats is not None  # a `tool` message always has its stats
        c = self.controller
        try:
            saved = c.store.add_message(self.conv_id, "tool", message["content"], stats=stats)
        except ChinwagError as e:
            c.error.emit(str(e))
            return
        self.last_tool_id, self.last_tool_stats = saved.id, stats
        if self.conv_id == c.conv_id:
            c.view.add_tool_result(saved.id, saved.content, stats)

    def _finish(self, status, note: str = "") -> None:
        c = self.controller
        if note and self.last_tool_id is not None:
            try:  # kept with the result, so the chat shows it when reopened
                c.store.update_message(self.last_tool_id, stats={**self.last_tool_stats, "note": note})
            except ChinwagError as e:
                c.error.emit(str(e))
            if self.conv_id == c.conv_id:
                c.view.set_tool_note(self.last_tool_id, note)
        c.end_tool_reply(self.conv_id, status)

    # --- the reply ------------------------------------------------------------------------

    async def _run(self, messages, params) -> None:
        c = self.controller
        try:
            tools_config = config.load()
        except ChinwagError as e:  # the servers run; the file broke since: every call asks
            c.error.emit(str(e))
            tools_config = config.ToolsConfig(())
        try:
            await tool_reply(
                self._turn,
                messages,
                params,
                self.host,
                Approvals(tools_config),
                self._ask,
                self._show,
                tools_config.max_rounds,
            )
        except asyncio.CancelledError:
            if self.card is not None:
                self.card.cancel()
            if self.abandoned:
                return
            self._record_stopped()
            self._finish(MessageStatus.STOPPED, "Stopped.")
        except Exception as e:  # noqa: BLE001 - a bug: its traceback to the log, one line to the user
            c.error.emit(report_bug(e, "a reply with tools"))
            self._finish(MessageStatus.FAILED)
        finally:
            if c.tool_reply is self and c.gen is None:
                c.tool_reply = None


def _stopped():
    from app.tools.client import ToolResult

    return ToolResult(STOPPED_RESULT, True)
