"""`‹ 2/3 ›` on a message with several versions (regenerated replies, edited messages)."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget


class VersionSwitcher(QWidget):
    stepRequested = Signal(int)  # -1: the previous version, +1: the next

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("versionSwitcher")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.prev_button = self._button("‹", "Previous version", -1, layout)
        self.label = QLabel()
        self.label.setObjectName("versionLabel")
        layout.addWidget(self.label)
        self.next_button = self._button("›", "Next version", 1, layout)
        self.version, self.versions = 1, 1
        self._enabled = True
        self.setVisible(False)

    def _button(self, text, tip, step, layout):
        button = QToolButton()
        button.setText(text)
        button.setObjectName("versionPrev" if step < 0 else "versionNext")
        button.setToolTip(tip)
        button.setAccessibleName(tip)  # "‹" alone means nothing to a screen reader
        button.setAutoRaise(True)
        button.clicked.connect(lambda: self.stepRequested.emit(step))
        layout.addWidget(button)
        return button

    def set_versions(self, version: int, versions: int):
        self.version, self.versions = version, versions
        self.label.setText(f"{version}/{versions}")
        widest = self.label.fontMetrics().horizontalAdvance(f"{versions}/{versions}")
        self.label.setMinimumWidth(widest)  # "9/10" and "10/10" leave the arrows where they were
        self.label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.label.setToolTip(f"Version {version} of {versions}")
        self.label.setAccessibleName(f"Version {version} of {versions}")
        self.setVisible(versions > 1)
        self._refresh()

    def set_actions_enabled(self, on: bool):
        """Off while a reply is being written: the conversation must not change under it."""
        self._enabled = on
        self._refresh()

    def _refresh(self):
        self.prev_button.setEnabled(self._enabled and self.version > 1)
        self.next_button.setEnabled(self._enabled and self.version < self.versions)
