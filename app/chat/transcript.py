"""Where a turn's messages are written, in the order the driver writes them: the user's message
before the engine sees it, each reply message as it streams (at least once a second), a round's
message with its calls, each call's result, and the reply's end with its status and stats.

`Transcript` writes nothing (a chat kept out of the store, the server's turns); `StoreTranscript`
writes to the store. No Qt."""

import time
from collections.abc import Callable, Sequence
from typing import Any

from app.core.attachments import StoredAttachment
from app.core.chats import UNSAVED, is_unsaved
from app.core.settings import TOOL_ROLE
from app.core.store import LAST, MessageRole, MessageStatus, Store
from app.core.turns import stats_dict
from app.tools.loop import ToolRun, stored_stats, tool_message
from engine.errors import ChinwagError
from engine.types import TurnStats

SAVE_INTERVAL_S = 1.0  # a streaming reply is written at least this often (a crash loses less)


class Transcript:
    """A chat that is not saved: every write is a no-op, and messages have no ids."""

    def __init__(self, conv_id: str = UNSAVED) -> None:
        self.conv_id = conv_id

    def user(self, text: str, attachments: Sequence[StoredAttachment] = (), parent_id: Any = LAST) -> str:
        """The user's message, written before the engine sees it; returns the chat's id."""
        return self.conv_id

    def begin(self, parent_id: Any = LAST) -> int | None:
        """An assistant message that starts streaming."""
        return None

    def grow(self, msg_id: int | None, text: str, now: bool = False) -> None:
        """The streaming message's text so far (written when SAVE_INTERVAL_S has passed, or `now`)."""

    def extend(self, msg_id: int) -> None:
        """A reply continued in its own message: streaming again."""

    def round(self, msg_id: int | None, text: str, stats: TurnStats) -> None:
        """An engine turn that ended with tool calls: complete, with its calls."""

    def tool(self, run: ToolRun) -> int | None:
        """A call's result, as a `tool` message."""
        return None

    def note(self, msg_id: int | None, note: str) -> None:
        """A note kept with a call's result ("stopped after 8 tool rounds…")."""

    def end(self, msg_id: int | None, text: str, status: str, stats: TurnStats | None, earlier_tokens: int = 0) -> None:
        """The reply's last message: its whole text, how it ended, its stats."""


class StoreTranscript(Transcript):
    """A saved chat. `conv_id` UNSAVED until the first message creates the conversation (with `settings`)."""

    def __init__(
        self,
        store: Store,
        conv_id: str,
        model_id: str,
        system_prompt: str = "",
        settings: dict[str, Any] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(conv_id)
        self.store, self.model_id, self.system_prompt, self.settings = store, model_id, system_prompt, settings
        # The window's: a write the store refuses (read-only, disk full) is told and the reply goes on;
        # without it the ChinwagError ends the turn (the terminal's one line).
        self.on_error = on_error
        self._saved: dict[int, tuple[str, float]] = {}  # a streaming message -> (text written, when)
        self._tool_stats: dict[int, dict[str, Any]] = {}  # a `tool` message -> its stats (a note joins them)

    def _write(self, write: Callable[[], object]) -> None:
        try:
            write()
        except ChinwagError as e:
            if self.on_error is None:
                raise
            self.on_error(str(e))

    def user(self, text: str, attachments: Sequence[StoredAttachment] = (), parent_id: Any = LAST) -> str:
        if is_unsaved(self.conv_id):
            self.conv_id = self.store.create_conversation(model_id=self.model_id, settings=self.settings).id
        self.store.add_message(self.conv_id, MessageRole.USER, text, parent_id=parent_id, attachments=attachments)
        return self.conv_id

    def begin(self, parent_id: Any = LAST) -> int:
        msg = self.store.begin_reply(self.conv_id, self.model_id, parent_id)
        self._saved[msg.id] = ("", time.monotonic())
        return msg.id

    def grow(self, msg_id: int | None, text: str, now: bool = False) -> None:
        if msg_id is None:
            return
        written, at = self._saved.get(msg_id, ("", 0.0))
        if text != written and (now or time.monotonic() - at >= SAVE_INTERVAL_S):
            self._saved[msg_id] = (text, time.monotonic())  # not tried again at once if the write fails
            self._write(lambda: self.store.update_message(msg_id, content=text))

    def extend(self, msg_id: int) -> None:
        self._write(lambda: self.store.update_message(msg_id, status=MessageStatus.STREAMING))
        self._saved[msg_id] = ("", time.monotonic())

    def round(self, msg_id: int | None, text: str, stats: TurnStats) -> None:
        if msg_id is None:
            return
        calls = stored_stats({"role": "assistant", "tool_calls": [c.to_openai() for c in stats.tool_calls]}) or {}
        row = {**stats_dict(stats, self.system_prompt), **calls}
        self._write(lambda: self.store.update_message(msg_id, content=text, status=MessageStatus.COMPLETE, stats=row))
        self._saved.pop(msg_id, None)

    def tool(self, run: ToolRun) -> int | None:
        message = tool_message(run)
        stats = stored_stats(message, run) or {}
        saved: list[int] = []
        self._write(
            lambda: saved.append(self.store.add_message(self.conv_id, TOOL_ROLE, message["content"], stats=stats).id)
        )
        if not saved:
            return None
        self._tool_stats[saved[0]] = stats
        return saved[0]

    def note(self, msg_id: int | None, note: str) -> None:
        if msg_id is not None:
            row = {**self._tool_stats.get(msg_id, {}), "note": note}
            self._write(lambda: self.store.update_message(msg_id, stats=row))

    def end(self, msg_id: int | None, text: str, status: str, stats: TurnStats | None, earlier_tokens: int = 0) -> None:
        if msg_id is None:
            return
        row = stats_dict(stats, self.system_prompt, earlier_tokens) if stats is not None else None
        self._write(lambda: self.store.update_message(msg_id, content=text, status=status, stats=row))
        self._saved.pop(msg_id, None)
