"""A stored `tool` message in the transcript: its collapsed ToolResultBlock, in a message widget."""

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.gui.chat.message_widget import MessageWidget
from app.gui.tools.cards import ToolResultBlock
from app.gui.tools.messages import note_of, run_from_stored


class ToolMessage(MessageWidget):
    """A `tool` message: its result block only (no author, no actions: the reply above owns them)."""

    def __init__(self, message_id: object, text: str, stats: object = None, parent: QWidget | None = None) -> None:
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
        self.set_note(note_of(stats))  # the round limit, Stop

    def set_can_regenerate(self, on: bool) -> None:
        self.regen_button.hide()

    def set_note(self, text: str) -> None:
        """A line under the block (the round limit, Stop)."""
        self.note.setText(text)
        self.note.setVisible(bool(text))
