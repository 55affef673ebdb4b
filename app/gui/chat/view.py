"""The transcript: a scrolling column of MessageWidgets, one per message.

Streaming text goes to the live message only. Deltas are buffered and a single-shot
QTimer re-renders at most RENDER_HZ times a second, however fast tokens arrive.
"""

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QScrollArea, QVBoxLayout, QWidget

from app.core.store import MessageRole
from app.gui.chat.attachments import show_on_message
from app.gui.chat.message_widget import MessageWidget
from app.gui.chat.welcome import Welcome
from app.gui.theme import READING_WIDTH

RENDER_HZ = 30
PAGE = 40  # messages shown when a conversation opens; older ones on request


class ChatView(QScrollArea):
    copyRequested = Signal(object)
    editRequested = Signal(object)
    regenerateRequested = Signal(object)
    promptChosen = Signal(str)  # an example prompt of the welcome state was clicked
    versionRequested = Signal(object, int)  # message id, step
    forkRequested = Signal(object)

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
        self.column = QWidget()
        self.column.setObjectName("chatColumn")
        self.column.setMaximumWidth(READING_WIDTH)
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
        self._hidden: list = []  # older stored messages not turned into widgets yet
        self.setWidget(self._inner)
        self._widgets: list[MessageWidget] = []
        self._stick = True
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)

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
        for widget in self._widgets:
            self._layout.removeWidget(widget)
            widget.deleteLater()
        self._widgets.clear()
        self._hidden = []
        self.more_button.setVisible(False)
        self.welcome.setVisible(True)

    def set_messages(self, messages, model_name: str = ""):
        """Show a stored conversation (the last PAGE messages; a button shows the rest)."""
        self.clear()
        messages = [m for m in messages if m.role != MessageRole.SYSTEM]
        self._hidden, shown = messages[:-PAGE], messages[-PAGE:]
        self._model_fallback = model_name
        for m in shown:
            widget = self.add_message(
                m.id, m.role, m.content, m.status, self._name(m), m.stats, m.model_id, versions=(m.version, m.versions)
            )
            show_on_message(widget, m.attachments)
        self._update_more()
        self._stick = True
        self.scroll_to_bottom()

    def _name(self, m):
        return self.model_name(m.model_id) if m.model_id else getattr(self, "_model_fallback", "")

    def show_earlier(self):
        """Insert the previous PAGE stored messages above the ones shown."""
        batch, self._hidden = self._hidden[-PAGE:], self._hidden[:-PAGE]
        self._stick = False
        bar = self.verticalScrollBar()
        from_bottom = bar.maximum() - bar.value()
        first = self._layout.indexOf(self._widgets[0]) if self._widgets else self._layout.count() - 1
        new = []
        for offset, m in enumerate(batch):
            widget = self._make(m.id, m.role, m.content, m.status, self._name(m), m.stats, m.model_id)
            widget.set_versions(m.version, m.versions)
            show_on_message(widget, m.attachments)
            self._layout.insertWidget(first + offset, widget)
            new.append(widget)
        self._widgets[:0] = new
        self._update_more()
        self._inner.adjustSize()
        bar.setValue(bar.maximum() - from_bottom)  # keep the message that was in view in view

    def _update_more(self):
        n = len(self._hidden)
        self.more_button.setText(f"Show {min(n, PAGE)} earlier messages ({n} not shown)")
        self.more_button.setVisible(n > 0)

    def add_message(
        self, message_id, role, text="", status="complete", model="", stats=None, model_id="", versions=(1, 1)
    ) -> MessageWidget:
        widget = self._make(message_id, role, text, status, model, stats, model_id)
        widget.set_versions(*versions)
        self._layout.insertWidget(self._layout.count() - 1, widget)
        self._widgets.append(widget)
        self.welcome.setVisible(False)
        self._update_regenerate()
        return widget

    def _make(self, message_id, role, text, status, model, stats, model_id) -> MessageWidget:
        widget = MessageWidget(message_id, role, text, status, model, stats, model_id=model_id)
        widget.copyRequested.connect(self.copyRequested)
        widget.editRequested.connect(self.editRequested)
        widget.regenerateRequested.connect(self.regenerateRequested)
        widget.versionRequested.connect(self.versionRequested)
        widget.forkRequested.connect(self.forkRequested)
        return widget

    def replace_from(self, message_id, messages):
        """Show messages (stored Message objects) in place of message_id and every later one:
        another version and the branch below it."""
        self.remove_from(message_id)
        for m in messages:
            widget = self.add_message(
                m.id, m.role, m.content, m.status, self._name(m), m.stats, m.model_id, versions=(m.version, m.versions)
            )
            show_on_message(widget, m.attachments)

    def remove_from(self, message_id):
        """Remove that message's widget and every later one."""
        ids = [w.message_id for w in self._widgets]
        if message_id not in ids:
            return
        for widget in self._widgets[ids.index(message_id) :]:
            if widget is self._live:
                self.end_stream()
            self._layout.removeWidget(widget)
            widget.deleteLater()
        del self._widgets[ids.index(message_id) :]
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
                widget.who_label.setText(self.model_name(widget.model_id))

    def set_actions_enabled(self, on: bool):
        for widget in self._widgets:
            widget.edit_button.setEnabled(on)
            widget.regen_button.setEnabled(on)
            widget.version_switcher.set_actions_enabled(on)

    def _update_regenerate(self):
        last = self._widgets[-1] if self._widgets else None
        for widget in self._widgets:
            widget.set_can_regenerate(widget is last and widget.role == MessageRole.ASSISTANT)

    # --- streaming ------------------------------------------------------
    def begin_stream(self, widget: MessageWidget):
        self.end_stream()
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
        self._live = None

    # --- scrolling ------------------------------------------------------
    def scroll_to_bottom(self):
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _on_range(self, _lo, hi):
        if self._stick:
            self.verticalScrollBar().setValue(hi)

    def _on_scroll(self, value):
        self._stick = value >= self.verticalScrollBar().maximum() - 4
