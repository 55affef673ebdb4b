"""Where the model's memory starts: once a reply's turn dropped the oldest messages to fit the
context (its stats' `dropped_messages`), the messages it no longer sees are dimmed and a line marks
the first one it still sees. Counted as app/core/settings.py engine_messages sends them."""

from collections.abc import Sequence
from typing import Any

from PySide6.QtWidgets import QGraphicsOpacityEffect, QLabel, QVBoxLayout, QWidget

from app.core.store import MessageRole, MessageStatus
from app.core.turns import stat

DIMMED = 0.45  # the opacity of a message the model no longer sees
MARK_TEXT = "The model's memory starts here: the messages above were dropped to fit its context."


def in_prompt(role: str, status: str, text: str, stats: Any, calls: bool = False) -> bool:
    """Whether a message is one of those a turn sends the model (failed and empty replies are not);
    `calls`: a reply that made tool calls (a live one's stats say so too)."""
    if role == MessageRole.TOOL:
        return True  # a tool's result answers the call before it
    if role not in (MessageRole.USER, MessageRole.ASSISTANT) or status == MessageStatus.FAILED:
        return False
    return role != MessageRole.ASSISTANT or bool(text) or calls or bool(stat(stats, "tool_calls", None))


def dropped_by_last_reply(widgets: Sequence[Any]) -> tuple[int, int]:
    """(how many of the oldest messages the last finished reply's turn left out, that reply's index)."""
    for i in range(len(widgets) - 1, -1, -1):
        w = widgets[i]
        stats = getattr(w, "message_stats", None)
        if w.role == MessageRole.ASSISTANT and stats:
            return int(stat(stats, "dropped_messages", 0) or 0), i
    return 0, len(widgets)


class MemoryMark:
    """The line above the first message the model still sees; owns the dimming of those above it."""

    def __init__(self, layout: QVBoxLayout) -> None:
        self.layout = layout
        self.line = QLabel(MARK_TEXT)
        self.line.setObjectName("memoryStart")
        self.line.setWordWrap(True)
        self.line.setVisible(False)
        layout.insertWidget(0, self.line)
        self.dimmed: list[QWidget] = []

    def update(self, hidden: Sequence[Any], widgets: Sequence[Any]) -> None:
        """hidden: the stored messages above the shown widgets (not shown yet: the oldest)."""
        dropped, reply = dropped_by_last_reply(widgets)
        left = dropped - sum(1 for m in hidden if in_prompt(m.role, m.status, m.content, m.stats, bool(m.tool_calls)))
        first_kept = 0
        while dropped and first_kept < reply and left > 0:
            w = widgets[first_kept]
            if in_prompt(
                w.role, w.status, w.text(), getattr(w, "message_stats", None), getattr(w, "has_tool_calls", False)
            ):
                left -= 1
            first_kept += 1
        for i, w in enumerate(widgets):
            self._dim(w, dropped > 0 and i < first_kept)
        shown = dropped > 0 and bool(widgets)
        self.layout.removeWidget(self.line)
        at = self.layout.indexOf(widgets[first_kept]) if shown else 0  # never past the reply that dropped them
        self.layout.insertWidget(max(0, at), self.line)
        self.line.setVisible(shown)

    def _dim(self, widget: QWidget, on: bool) -> None:
        if on == (widget in self.dimmed):
            return
        if on:
            effect = QGraphicsOpacityEffect(widget)
            effect.setOpacity(DIMMED)
            widget.setGraphicsEffect(effect)
            widget.setToolTip("The model no longer sees this message: it was dropped to fit the context")
            self.dimmed.append(widget)
        else:
            widget.setGraphicsEffect(None)  # type: ignore[arg-type]  # Qt takes None: no effect
            widget.setToolTip("")
            self.dimmed.remove(widget)

    def forget(self, widget: QWidget) -> None:
        """A widget left the view."""
        if widget in self.dimmed:
            self.dimmed.remove(widget)
