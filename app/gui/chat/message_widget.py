"""One chat message: who said it, the text, its stats and its actions.

A message owns its own document (GPT4All-style): streaming updates touch only the live
message, and a finished message is frozen (its text is not re-rendered again).
"""

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QStyle,
    QStyleOptionToolButton,
    QStylePainter,
    QToolButton,
    QVBoxLayout,
)

from app.core.store import MessageRole, MessageStatus
from app.core.turns import cut_note, stat
from app.gui.chat.header import ElidedLabel
from app.gui.chat.markdown_view import MarkdownView, ProseView
from app.gui.chat.version_switcher import VersionSwitcher
from engine.types import FinishReason

# Longer user messages show their start, with Show more; Copy and the engine always get all of it.
# A paste of a few hundred words is already a wall: fold by characters and by lines.
USER_DISPLAY_LIMIT = 1_000  # characters shown folded
USER_DISPLAY_LINES = 12  # lines shown folded

# Widget-only statuses (never stored): the message waits for the model to load, or for the
# reply being written to end (app/gui/chat/queue.py).
QUEUED = "queued"
QUEUED_NEXT = "queued-next"
STATUS_NOTES = {
    MessageStatus.STOPPED: "Stopped",
    MessageStatus.FAILED: "Failed",
    MessageStatus.STREAMING: "",
    MessageStatus.COMPLETE: "",
    QUEUED: "Queued: sent when the model is ready",
    QUEUED_NEXT: "Queued: sent when the reply being written ends",
}


class FoldButton(QToolButton):
    """Show more / Show less: narrower than its text when the column is (a big font in a small
    window), drawn elided ("Show more (1,266 more…"); text() stays whole."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)  # its text's width, or less

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.fontMetrics().horizontalAdvance("Show more…") + 12), hint.height())

    def paintEvent(self, event):
        painter = QStylePainter(self)
        option = QStyleOptionToolButton()
        self.initStyleOption(option)
        room = (
            self.style()
            .subControlRect(QStyle.ComplexControl.CC_ToolButton, option, QStyle.SubControl.SC_ToolButton, self)
            .width()
        )
        option.text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, max(0, room - 8))
        painter.drawComplexControl(QStyle.ComplexControl.CC_ToolButton, option)


def folded(text: str) -> str:
    """The start of a long user message: at most USER_DISPLAY_LINES lines and USER_DISPLAY_LIMIT
    characters, cut at a word; the text itself if it is short enough to show whole."""
    lines = text.split("\n")
    if len(text) <= USER_DISPLAY_LIMIT and len(lines) <= USER_DISPLAY_LINES:
        return text
    head = "\n".join(lines[:USER_DISPLAY_LINES])[:USER_DISPLAY_LIMIT]
    if len(head) < len(text) and not text[len(head)].isspace():
        cut = max(head.rfind(" "), head.rfind("\n"))
        head = head[:cut] if cut > len(head) // 2 else head  # a word, unless it is one long run
    return head.rstrip()


def format_stats(stats) -> str:
    """'42 tokens · 31.5 tok/s · first token 0.21 s' from a TurnStats or its dict."""
    if not stats:
        return ""
    parts = [f"{stat(stats, 'generated_tokens', 0)} tokens"]
    tps = stat(stats, "decode_tps", 0) or 0
    parts.append(f"{tps:.1f} tok/s")
    ttft = stat(stats, "ttft_s", 0) or 0
    parts.append(f"first token {ttft:.2f} s")
    reused = stat(stats, "reused_tokens", 0) or 0
    if reused:  # from the KV cache, or what a server reported from its prefix cache
        parts.append(f"{reused:,} prompt tokens reused")
    dropped = stat(stats, "dropped_messages", 0) or 0
    if dropped:
        parts.append(f"dropped {dropped} old {'message' if dropped == 1 else 'messages'} to fit the context")
    if note := cut_note(stats):
        parts.append(note)
    return " · ".join(parts)


def format_speculation(stats) -> str:
    """The stats tooltip's line on speculative decoding: drafted tokens the model accepted."""
    drafted = stat(stats, "drafted_tokens", 0) or 0
    if not drafted:
        off = stat(stats, "speculation_off", "") or ""
        return off[:1].upper() + off[1:] + "." if off else ""
    accepted = stat(stats, "accepted_tokens", 0) or 0
    return f"Speculative decoding: {accepted} of {drafted} drafted tokens accepted ({accepted / drafted:.0%})"


class MessageWidget(QFrame):
    live_note = ""  # set_live_note
    copyRequested = Signal(object)
    editRequested = Signal(object)
    regenerateRequested = Signal(object)
    continueRequested = Signal(object)  # a reply cut at max tokens: write on from its end
    versionRequested = Signal(object, int)  # message id, -1 (previous) or +1 (next)
    forkRequested = Signal(object)

    def __init__(
        self,
        message_id,
        role: str,
        text: str = "",
        status: str = MessageStatus.COMPLETE,
        model: str = "",
        stats=None,
        parent=None,
        model_id: str = "",
    ):
        super().__init__(parent)
        self.message_id = message_id
        self.model_id = model_id
        self.role = role
        self.status = status  # before the first render: finished text renders merged
        self.message_stats = stats  # the stored stats (the view reads a turn's dropped messages)
        self.has_tool_calls = False  # a reply that made tool calls (the view sets it)
        self._text = text
        self.setObjectName("userMessage" if role == MessageRole.USER else "assistantMessage")
        self.setProperty("role", role)
        self.setFrameShape(QFrame.Shape.NoFrame)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        head = QHBoxLayout()
        layout.addLayout(head)  # first: a widget shown before it has a parent becomes a window
        who = "You" if role == MessageRole.USER else (model or "Assistant")
        self.who_label = ElidedLabel(who)  # a long model name must not widen the column
        self.who_label.setObjectName("messageAuthor")
        head.addWidget(self.who_label, 1)
        self.version_switcher = VersionSwitcher()
        self.version_switcher.stepRequested.connect(lambda step: self.versionRequested.emit(self.message_id, step))
        head.addWidget(self.version_switcher)
        self.copy_button = self._action(head, "Copy", "Copy this message", self.copyRequested)
        self.copy_button.clicked.connect(self.show_copied)
        self.edit_button = self._action(head, "Edit", "Edit and resend this message", self.editRequested)
        self.regen_button = self._action(head, "Regenerate", "Write this reply again", self.regenerateRequested)
        self.edit_button.setVisible(role == MessageRole.USER)
        self.regen_button.setVisible(False)
        # A reply keeps Regenerate's room when it is not the last: ‹ › stay put across versions.
        room = self.regen_button.sizePolicy()
        room.setRetainSizeWhenHidden(role != MessageRole.USER)
        self.regen_button.setSizePolicy(room)
        self._expanded = False  # a long user message shows all of its text

        self.body: ProseView | MarkdownView
        if role == MessageRole.USER:
            self.body = ProseView()
            self.body.setObjectName("userText")
        else:
            self.body = MarkdownView()
        layout.addWidget(self.body)
        self.more_button = FoldButton()
        self.more_button.setText("Show more")
        self.more_button.setObjectName("showMoreButton")
        self.more_button.setAutoRaise(True)
        self.more_button.clicked.connect(self.toggle_more)
        self.more_button.setVisible(False)
        layout.addWidget(self.more_button)
        self.stats_label = QLabel()
        self.stats_label.setObjectName("messageStats")
        self.stats_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stats_label.setWordWrap(True)  # the whole line, on two if the column is narrow
        layout.addWidget(self.stats_label)
        self.continue_button = QToolButton()
        self.continue_button.setObjectName("continueButton")
        self.continue_button.setText("Continue")
        self.continue_button.setToolTip("Write on from where the reply stopped (it hit max tokens)")
        self.continue_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)  # framed: it reads as a button
        self.continue_button.clicked.connect(lambda: self.continueRequested.emit(self.message_id))
        self.continue_button.setVisible(False)
        layout.addWidget(self.continue_button, 0, Qt.AlignmentFlag.AlignLeft)
        self._cut = False  # the reply stopped at max tokens
        self._render()
        self.set_stats(stats)
        self.set_status(status)

    def _action(self, layout, text, tip, signal):
        from app.gui.icons import set_icon

        button = QToolButton()
        button.setObjectName(f"{text.lower()}Button")
        set_icon(button, text.lower())
        button.setToolTip(tip)
        button.setAccessibleName(text)
        button.setAutoRaise(True)
        button.clicked.connect(lambda: signal.emit(self.message_id))
        layout.addWidget(button)
        return button

    def text(self) -> str:
        return self._text

    def set_text(self, text: str):
        """Replace the text and re-render (only blocks that changed are re-parsed)."""
        self._text = text
        self._render()

    def _render(self):
        if isinstance(self.body, ProseView):  # a user's message
            text = self._text
            head = folded(text)
            long = head != text
            if long and not self._expanded:
                more = len(text) - len(head)
                text = head + "…"
                self.more_button.setText(f"Show more ({more:,} more characters)")
            elif long:
                self.more_button.setText("Show less")
            self.more_button.setVisible(long)
            self.body.set_plain(text)
        else:
            self.body.set_text(self._text, merge=self.status != MessageStatus.STREAMING)

    def set_status(self, status: str, error: str = ""):
        self.status = status
        self.setProperty("status", status)
        self._refresh_footer(error)
        self.copy_button.setEnabled(status != MessageStatus.STREAMING)
        self.edit_button.setEnabled(status != MessageStatus.STREAMING)
        if status == MessageStatus.STREAMING:
            self.continue_button.setVisible(False)
        self.style().unpolish(self)
        self.style().polish(self)

    def set_stats(self, stats):
        self._cut = stat(stats, "finish_reason", "") == FinishReason.LENGTH if stats else False
        self._stats_text = format_stats(stats)
        self.stats_label.setToolTip(format_speculation(stats))
        self._refresh_footer()

    def _refresh_footer(self, error: str = ""):
        parts = []
        note = STATUS_NOTES.get(self.status, "")
        if self.status == MessageStatus.STREAMING and self.role == MessageRole.ASSISTANT:
            note = self.live_note or "Writing…"
        if note:
            parts.append(note + (f": {error}" if error else ""))
        elif error:
            parts.append(error)
        if getattr(self, "_stats_text", ""):
            parts.append(self._stats_text)
        self.stats_label.setText(" — ".join(parts))
        self.stats_label.setVisible(bool(parts))

    def toggle_more(self):
        self._expanded = not self._expanded
        self._render()

    def show_copied(self):
        from app.gui.copy_feedback import flash_copied

        flash_copied(self.copy_button, icon="copied")

    def set_live_note(self, text: str):
        """What a streaming reply says before its text ("Reading your message… 43%"); "" is "Writing…"."""
        self.live_note = text
        self._refresh_footer()

    def set_can_regenerate(self, on: bool):
        self.regen_button.setVisible(on and self.role == MessageRole.ASSISTANT)

    def set_can_continue(self, on: bool):
        """Continue shows on the chat's last reply when it hit max tokens (and is not being written)."""
        done = self.status in (MessageStatus.COMPLETE, MessageStatus.STOPPED)
        self.continue_button.setVisible(on and self.role == MessageRole.ASSISTANT and self._cut and done)

    def set_versions(self, version: int, versions: int):
        self.version_switcher.set_versions(version, versions)

    def extend_context_menu(self, menu: QMenu):
        """The message's own actions, added to whichever context menu opens over it."""
        menu.addSeparator()
        copy = menu.addAction("Copy Message")
        copy.setEnabled(self.status != MessageStatus.STREAMING)
        copy.triggered.connect(lambda: self.copyRequested.emit(self.message_id))
        fork = menu.addAction("Fork from Here")
        fork.setToolTip("A new conversation with this chat up to this message")
        fork.setEnabled(self.status != MessageStatus.STREAMING)
        fork.triggered.connect(lambda: self.forkRequested.emit(self.message_id))

    def context_menu(self) -> QMenu:
        menu = QMenu(self)
        self.extend_context_menu(menu)
        return menu

    def contextMenuEvent(self, event):
        menu = self.context_menu()
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(event.globalPos())  # not exec(): no nested loop under qasync
