"""The transcript: a scrolling column of MessageWidgets, one per message.

Streaming text goes to the live message only. Deltas are buffered and a single-shot
QTimer re-renders at most RENDER_HZ times a second, however fast tokens arrive.
"""

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QScrollArea, QVBoxLayout, QWidget

from app.core.store import Message, MessageRole, StoredToolResult
from app.core.turns import stat
from app.gui.chat.memory_mark import MemoryMark
from app.gui.chat.message_widget import MessageWidget
from app.gui.chat.sent_attachments import show_on_message, show_passages_used
from app.gui.chat.welcome import Welcome
from app.gui.theme import ReadingColumn

RENDER_HZ = 30
PAGE = 40  # messages shown when a conversation opens; older ones on request
HOLD_MS = 500  # a switched version is held in place this long while its branch lays out


def tool_of(m: Message) -> StoredToolResult | tuple | None:
    """A stored message's tool round as the view shows it: a result's call and outcome, or a reply's calls."""
    return m.tool_result if m.role == MessageRole.TOOL else m.tool_calls


class ChatView(QScrollArea):
    copyRequested = Signal(object)
    editRequested = Signal(object)
    regenerateRequested = Signal(object)
    continueRequested = Signal(object)
    promptChosen = Signal(str)  # an example prompt of the welcome state was clicked
    versionRequested = Signal(object, int)  # message id, step
    forkRequested = Signal(object)
    replyMissing = Signal(bool)  # the last message shown is the user's, without a reply (a fork's)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._inner = QWidget()
        self._inner.setObjectName("chatInner")
        # A centred reading column: lines stay readable however wide the window is.
        row = QHBoxLayout(self._inner)
        row.setContentsMargins(0, 0, 0, 0)
        self.column = ReadingColumn()
        self.column.setObjectName("chatColumn")
        row.addStretch(1)
        row.addWidget(self.column, 1000)
        row.addStretch(1)
        self._layout = QVBoxLayout(self.column)
        self._layout.setContentsMargins(16, 12, 16, 12)
        self._layout.setSpacing(10)
        self.welcome = Welcome()
        self.welcome.promptChosen.connect(self.promptChosen)
        self._layout.addWidget(self.welcome)
        self.more_button = QPushButton()
        self.more_button.setObjectName("earlierButton")
        self.more_button.setFlat(True)
        self.more_button.clicked.connect(self.show_earlier)
        self.more_button.setVisible(False)
        self._layout.addWidget(self.more_button)
        self._layout.addStretch(1)
        self.memory_mark = MemoryMark(self._layout)  # dims what the last turn dropped to fit the context
        self._hidden: list = []  # older stored messages not turned into widgets yet
        self.setWidget(self._inner)
        self._widgets: list[MessageWidget] = []
        self._stick = False  # follow the end of the chat (not while the welcome shows)
        self._held: tuple[object, int] | None = None  # (message id, its top in the view) kept while the layout settles
        self._slack = 0  # room added below the last message so a held one can stay in place
        self._continue_here = True  # the loaded model can continue a reply cut at max tokens
        self._hold_timer = QTimer(self)
        self._hold_timer.setSingleShot(True)
        self._hold_timer.setInterval(HOLD_MS)
        self._hold_timer.timeout.connect(lambda: setattr(self, "_held", None))
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)
        self.verticalScrollBar().actionTriggered.connect(self._on_user_scroll)

        self._live: MessageWidget | None = None
        self._live_text = ""
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(1000 // RENDER_HZ)
        self._timer.timeout.connect(self._flush)
        self.render_count = 0  # live re-renders, for tests and benches
        self.model_name = lambda model_id: model_id  # the window maps ids to display names

    # --- messages -------------------------------------------------------
    def clear(self):
        self.end_stream()
        self._held = None
        self._set_slack(0)
        for widget in self._widgets:
            self._layout.removeWidget(widget)
            self.memory_mark.forget(widget)
            widget.deleteLater()
        self._widgets.clear()
        self._hidden = []
        self.memory_mark.update([], [])
        self.more_button.setVisible(False)
        self.welcome.setVisible(True)
        self._update_regenerate()
        self._stick = False  # the welcome is read from its top (its heading), not scrolled to its end
        self.verticalScrollBar().setValue(0)

    def set_messages(self, messages, model_name: str = ""):
        """Show a stored conversation (the last PAGE messages; a button shows the rest)."""
        self.clear()
        messages = [m for m in messages if m.role != MessageRole.SYSTEM]
        self._hidden, shown = messages[:-PAGE], messages[-PAGE:]
        self._model_fallback = model_name
        for m in shown:
            self._add_stored(m)
        self._update_more()
        self.memory_mark.update(self._hidden, self._widgets)
        self._stick = True
        self.scroll_to_bottom()

    def _add_stored(self, m: Message) -> None:
        """A stored message at the end of the view, with its version, tool round and documents."""
        widget = self.add_message(
            m.id, m.role, m.content, m.status, self._name(m), m.stats, m.model_id, (m.version, m.versions), tool_of(m)
        )
        show_on_message(widget, m.attachments)

    def _name(self, m):
        return self.model_name(m.model_id) if m.model_id else getattr(self, "_model_fallback", "")

    def show_earlier(self):
        """Insert the previous PAGE stored messages above the ones shown."""
        batch, self._hidden = self._hidden[-PAGE:], self._hidden[:-PAGE]
        self._stick = False
        bar = self.verticalScrollBar()
        from_bottom = bar.maximum() - bar.value()
        first = self._layout.indexOf(self._widgets[0]) if self._widgets else self._layout.count() - 1
        new: list[MessageWidget] = []
        for offset, m in enumerate(batch):
            widget = self._make(m.id, m.role, m.content, m.status, self._name(m), m.stats, m.model_id, tool_of(m))
            widget.set_versions(m.version, m.versions)
            show_on_message(widget, m.attachments)
            show_passages_used(widget, new[-1] if new else None)
            self._layout.insertWidget(first + offset, widget)
            new.append(widget)
        self._widgets[:0] = new
        self._update_more()
        self.memory_mark.update(self._hidden, self._widgets)
        self._inner.adjustSize()
        bar.setValue(bar.maximum() - from_bottom)  # keep the message that was in view in view

    def _update_more(self):
        n = len(self._hidden)
        self.more_button.setText(f"Show {min(n, PAGE)} earlier messages ({n} not shown)")
        self.more_button.setVisible(n > 0)

    def add_message(
        self,
        message_id,
        role,
        text="",
        status="complete",
        model="",
        stats=None,
        model_id="",
        versions=(1, 1),
        tool=None,  # a stored message's tool round (tool_of)
    ) -> MessageWidget:
        widget = self._make(message_id, role, text, status, model, stats, model_id, tool)
        widget.set_versions(*versions)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._widgets.append(widget)
        if self.welcome.isVisibleTo(self):
            self._stick = True  # the first message: from now on the view follows the chat's end
        show_passages_used(widget, self._widgets[-2] if len(self._widgets) > 1 else None)
        self.welcome.setVisible(False)
        self._update_regenerate()
        return widget

    def _make(self, message_id, role, text, status, model, stats, model_id, tool=None) -> MessageWidget:
        from app.gui.chat.tool_message import ToolMessage
        from app.gui.tools.messages import visible_text

        calls = bool(tool) and role == MessageRole.ASSISTANT or bool(stat(stats, "tool_calls", None))
        if role == MessageRole.TOOL:  # a tool's result: its collapsed block
            widget: MessageWidget = ToolMessage(message_id, text, tool if tool is not None else stats)
        else:
            if calls:  # the calls show as the blocks below
                text = visible_text(text)
            widget = MessageWidget(message_id, role, text, status, model, stats, model_id=model_id)
        widget.message_stats = stats  # what memory_mark reads: the turn's dropped messages
        widget.has_tool_calls = calls
        widget.copyRequested.connect(self.copyRequested)
        widget.editRequested.connect(self.editRequested)
        widget.regenerateRequested.connect(self.regenerateRequested)
        widget.continueRequested.connect(self.continueRequested)
        widget.versionRequested.connect(self.versionRequested)
        widget.forkRequested.connect(self.forkRequested)
        return widget

    def add_approval(self, message_id, call, server: str, tool: str):
        """The approval card of a call, inline in the reply that made it (None: that reply is not shown)."""
        from app.gui.tools.cards import ApprovalCard

        widget = self.widget_for(message_id)
        if widget is None:
            return None
        card = ApprovalCard(call, server, tool)
        layout = widget.layout()
        assert isinstance(layout, QVBoxLayout)  # MessageWidget's column
        layout.insertWidget(layout.indexOf(widget.stats_label), card)
        self._stick = True
        return card

    def replace_from(self, message_id, messages):
        """Show messages (stored Message objects) in place of message_id and every later one:
        another version and the branch below it. The new version stays where the old one was
        on screen (its ‹ › under the mouse), however long the branches are."""
        old = self.widget_for(message_id)
        top = old.mapTo(self.viewport(), QPoint(0, 0)).y() if old is not None else None
        self.remove_from(message_id)
        for m in messages:
            self._add_stored(m)
        self.memory_mark.update(self._hidden, self._widgets)
        if top is not None and messages:
            self._hold(messages[0].id, top)

    def remove_from(self, message_id):
        """Remove that message's widget and every later one."""
        ids = [w.message_id for w in self._widgets]
        if message_id not in ids:
            return
        for widget in self._widgets[ids.index(message_id) :]:
            if widget is self._live:
                self.end_stream()
            self._layout.removeWidget(widget)
            self.memory_mark.forget(widget)
            widget.deleteLater()
        del self._widgets[ids.index(message_id) :]
        self.memory_mark.update(self._hidden, self._widgets)
        self.welcome.setVisible(not self._widgets)
        self._update_regenerate()

    def widget_for(self, message_id) -> MessageWidget | None:
        for widget in self._widgets:
            if widget.message_id == message_id:
                return widget
        return None

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._widgets)

    def refresh_model_names(self):
        for widget in self._widgets:
            if widget.role == MessageRole.ASSISTANT and widget.model_id:
                widget.who_label.set_full_text(self.model_name(widget.model_id))

    def set_actions_enabled(self, on: bool):
        for widget in self._widgets:
            widget.edit_button.setEnabled(on)
            widget.regen_button.setEnabled(on)
            widget.continue_button.setEnabled(on)
            widget.version_switcher.set_actions_enabled(on)

    def set_continue_allowed(self, on: bool):
        """Whether the loaded model can continue a reply (a model on this computer; a server cannot)."""
        self._continue_here = on
        self._update_regenerate()

    def _update_regenerate(self):
        last = self._widgets[-1] if self._widgets else None
        for widget in self._widgets:
            widget.set_can_regenerate(widget is last and widget.role == MessageRole.ASSISTANT)
            widget.set_can_continue(widget is last and self._continue_here)
        self.replyMissing.emit(last is not None and last.role == MessageRole.USER)

    # --- streaming ------------------------------------------------------
    def begin_stream(self, widget: MessageWidget):
        self.end_stream()
        self._held = None
        self._live = widget
        self._live_text = widget.text()
        self._stick = True
        self.scroll_to_bottom()

    def append_delta(self, text: str):
        if self._live is None:
            return
        self._live_text += text
        if not self._timer.isActive():
            self._timer.start()

    def live_text(self) -> str:
        return self._live_text

    def is_streaming(self) -> bool:
        return self._live is not None

    def _flush(self):
        if self._live is not None and self._live.text() != self._live_text:
            self._live.set_text(self._live_text)
            self.render_count += 1

    def end_stream(self, status: str | None = None, stats=None, error: str = ""):
        """Render what is left, then freeze the live message."""
        if self._live is None:
            return
        self._timer.stop()
        self._flush()
        if status:
            self._live.set_status(status, error)
        if stats is not None:
            self._live.set_stats(stats)
            self._live.message_stats = stats
        self._live = None
        self.memory_mark.update(self._hidden, self._widgets)
        self._update_regenerate()  # a reply that hit max tokens offers Continue

    # --- scrolling ------------------------------------------------------
    def scroll_to_bottom(self):
        self._held = None
        self._set_slack(0)
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _hold(self, message_id, top: int):
        """Keep that message's top `top` pixels below the view's top while the layout settles
        (until the user scrolls, a reply starts, or HOLD_MS pass). A shorter branch below it
        leaves room at the bottom (slack) rather than pulling the message down."""
        self._held = (message_id, top)
        self._stick = False
        self._keep_held(self.verticalScrollBar().maximum())
        self._hold_timer.start()

    def _keep_held(self, hi: int) -> bool:
        if self._held is None:
            return False
        message_id, top = self._held
        widget = self.widget_for(message_id)
        if widget is None:
            return False
        row = self._inner.layout()
        assert row is not None  # the row made in __init__
        row.activate()
        self._layout.activate()  # the column's
        want = widget.mapTo(self._inner, QPoint(0, 0)).y() - top
        if want > hi:  # the view cannot scroll that far yet: room below, then again
            self._set_slack(self._slack + want - hi)
        self.verticalScrollBar().setValue(want)
        return True

    def _set_slack(self, slack: int):
        slack = max(0, slack)
        if slack != self._slack:
            self._slack = slack
            self._layout.setContentsMargins(16, 12, 16, 12 + slack)

    def _on_range(self, _lo, hi):
        if self._keep_held(hi):
            return
        if self._stick:
            self.verticalScrollBar().setValue(hi)

    def _on_scroll(self, value):
        bar = self.verticalScrollBar()
        if self._held is None and self._slack:  # room left below the view is not kept
            self._set_slack(self._slack - (bar.maximum() - value))
        self._stick = value >= bar.maximum() - 4 and self._held is None

    def _on_user_scroll(self, _action):
        self._held = None  # the user moves the view: stop holding the message in place
