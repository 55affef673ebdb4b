"""Dismissable notice bars above the chat (store notice, load failures, Undo delete)."""

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


class NoticeBar(QFrame):
    closed = Signal(object)
    focusReleased = Signal()  # it held the keyboard (its button was clicked) and is gone

    def __init__(self, key, text, kind="info", action=None, parent=None):
        super().__init__(parent)
        self.key = key
        self.setObjectName("noticeBar")
        self.setProperty("kind", kind)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label, 1)
        self.action_button = None
        if action is not None:
            name, callback = action
            self.action_button = QPushButton(name)
            self.action_button.clicked.connect(callback)
            self.action_button.clicked.connect(self.dismiss)
            layout.addWidget(self.action_button)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.dismiss)
        layout.addWidget(close)

    def text(self) -> str:
        return self.label.text()

    def dismiss(self):
        if self.isHidden():
            return
        focused = QApplication.focusWidget()
        had_focus = focused is not None and (focused is self or self.isAncestorOf(focused))
        self.closed.emit(self)
        self.hide()  # Qt hands the focus to the next widget in the chain: a search box, a message's button
        self.deleteLater()
        if had_focus:
            self.focusReleased.emit()


class NoticeArea(QWidget):
    focusReleased = Signal()  # a bar that held the keyboard closed: the window gives it back to typing

    def __init__(self, parent=None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(8, 4, 8, 0)
        self._layout.setSpacing(4)
        self._bars: dict[str, NoticeBar] = {}

    def show_notice(self, key, text, kind="info", action=None, timeout_ms=0) -> NoticeBar:
        """Show text; a notice with the same key replaces the old one."""
        self.dismiss(key)
        bar = NoticeBar(key, text, kind, action)
        bar.closed.connect(self._forget)
        bar.focusReleased.connect(self.focusReleased)
        self._bars[key] = bar
        self._layout.addWidget(bar)
        if timeout_ms:
            QTimer.singleShot(timeout_ms, bar, bar.dismiss)
        return bar

    def _forget(self, bar: NoticeBar) -> None:
        if self._bars.get(bar.key) is bar:
            del self._bars[bar.key]

    def dismiss(self, key):
        bar = self._bars.pop(key, None)
        if bar is not None:
            bar.dismiss()

    def texts(self) -> list[str]:
        return [bar.text() for bar in self._bars.values()]

    def bar(self, key):
        return self._bars.get(key)
