"""Tool rounds in the transcript: a stored `tool` message shown as its collapsed ToolResultBlock, and a
reply that made calls shown without the call's markup (the blocks below it show the calls)."""

import dataclasses

from PySide6.QtWidgets import QLabel, QVBoxLayout

from app.core.store import StoredToolResult
from app.gui.chat.message_widget import MessageWidget
from app.gui.tools.cards import ToolResultBlock
from app.tools.client import ToolResult
from app.tools.loop import ToolRun
from engine.types import ToolCall

# Where the common families' tool calls begin (mlx_lm/tool_parsers): a reply's text is shown up to there.
CALL_MARKERS = (
    "<tool_call>",
    "<|tool_call>",
    "[TOOL_CALLS]",
    "<|tool_call_start|>",
    "<|tool_calls_section_begin|>",
    "<start_function_call>",
    "<minimax:tool_call>",
    "<longcat_tool_call>",
    "<|python_tag|>",
)


def visible_text(text: str) -> str:
    """A reply's text without the tool calls it ends with (what the model said before calling)."""
    cut = min((i for i in (text.find(m) for m in CALL_MARKERS) if i >= 0), default=len(text))
    return text[:cut].rstrip()


def run_from_stored(content: str, stats) -> ToolRun:
    """A `tool` message as the ToolRun its block shows: from the store (its StoredToolResult), or as a reply
    with tools saves it (app/tools/loop.py stored_stats)."""
    if isinstance(stats, StoredToolResult):
        stats = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None}
    s = stats if isinstance(stats, dict) else {}
    call = ToolCall(str(s.get("tool_call_id", "")), str(s.get("name", "tool")), str(s.get("arguments", "{}")))
    result = ToolResult(content, bool(s.get("is_error")), float(s.get("seconds") or 0.0))
    return ToolRun(call, str(s.get("server", "")), result, bool(s.get("allowed", True)))


class ToolMessage(MessageWidget):
    """A `tool` message: its result block only (no author, no actions: the reply above owns them)."""

    def __init__(self, message_id, text: str, stats=None, parent=None):
        super().__init__(message_id, "tool", "", stats=None, parent=parent)
        self.setObjectName("toolMessage")
        self._text = text
        for widget in (self.who_label, self.body, self.copy_button, self.edit_button, self.regen_button):
            widget.hide()
        self.version_switcher.hide()
        self.run = run_from_stored(text, stats)
        self.block = ToolResultBlock(self.run)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)  # MessageWidget's column
        layout.insertWidget(1, self.block)
        self.note = QLabel()
        self.note.setObjectName("toolNote")
        self.note.setWordWrap(True)
        self.note.hide()
        layout.addWidget(self.note)
        self.set_note(self.note_of(stats))  # the round limit, Stop

    @staticmethod
    def note_of(stats) -> str:
        if isinstance(stats, StoredToolResult):
            return stats.note
        return str(stats.get("note", "")) if isinstance(stats, dict) else ""

    def set_can_regenerate(self, on: bool):
        self.regen_button.hide()

    def set_note(self, text: str) -> None:
        """A line under the block (the round limit, Stop)."""
        self.note.setText(text)
        self.note.setVisible(bool(text))
