"""The bar above the transcript: sidebar toggle, the chat's title, its markers, and a slot
for more controls (the model picker is added with `add_widget`)."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QToolButton, QWidget

from app.gui import tooltips


class ElidedLabel(QLabel):
    """Keeps the whole text; elides it only when drawn narrower than it needs."""

    def __init__(self, text="", parent=None):
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(40)
        self.set_full_text(text)

    def set_full_text(self, text: str):
        self._full = text
        self.setToolTip(tooltips.plain(text))
        self._elide()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._elide()

    def _elide(self):
        shown = QFontMetrics(self.font()).elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 40))
        if shown != self.text():
            self.setText(shown)


EXTRAS_SHARE = 0.4  # of the bar's width, at most, for the controls at its right end


class ChatHeader(QWidget):
    toggleSidebarRequested = Signal()
    settingsRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("chatHeader")
        self._layout = QHBoxLayout(self)
        self._layout.setContentsMargins(8, 4, 8, 4)
        self._layout.setSpacing(8)
        self.sidebar_button = QToolButton()
        self.sidebar_button.setText("☰")
        self.sidebar_button.setObjectName("sidebarToggle")
        self.sidebar_button.setAutoRaise(True)
        self.sidebar_button.setToolTip("Show or hide the chat list (Ctrl+Shift+S)")
        self.sidebar_button.clicked.connect(self.toggleSidebarRequested)
        self._layout.addWidget(self.sidebar_button)
        self.title_label = ElidedLabel("New chat")
        self.title_label.setObjectName("chatTitle")
        self._layout.addWidget(self.title_label, 1)
        # A chat with its own system prompt says so (it changes every reply).
        self.prompt_marker = QToolButton()
        self.prompt_marker.setText("Custom system prompt")
        self.prompt_marker.setObjectName("systemPromptMarker")
        self.prompt_marker.setAutoRaise(True)
        self.prompt_marker.clicked.connect(self.settingsRequested)
        self.prompt_marker.setVisible(False)
        self._layout.addWidget(self.prompt_marker)
        self._extras = QHBoxLayout()  # other controls (model picker) go here, right-aligned
        self._extras.setContentsMargins(0, 0, 0, 0)
        self._layout.addLayout(self._extras)

    def add_widget(self, widget: QWidget):
        """Add a control at the header's right end."""
        self._extras.addWidget(widget)
        self._share_width()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._share_width()

    def _share_width(self):
        # At most EXTRAS_SHARE of the bar each: a long model name elides before the chat's title does.
        for i in range(self._extras.count()):
            item = self._extras.itemAt(i)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.setMaximumWidth(max(widget.minimumSizeHint().width(), int(self.width() * EXTRAS_SHARE)))

    def set_title(self, title: str):
        self.title_label.set_full_text(title or "New chat")

    def title(self) -> str:
        return self.title_label.full_text()

    def set_custom_prompt(self, prompt):
        """Show the marker when this chat sets its own system prompt (None: it uses the default)."""
        self.prompt_marker.setVisible(prompt is not None)
        prompt = prompt or "(empty: no system prompt)"
        short = prompt if len(prompt) <= 300 else prompt[:300] + "…"
        self.prompt_marker.setToolTip(tooltips.plain(f"This chat has its own system prompt (click to edit):\n{short}"))
