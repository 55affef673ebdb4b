"""The "Copied" a copy button shows, reset after a moment so it never says so forever."""

from PySide6.QtCore import QTimer

COPIED_MS = 2000


def flash_copied(button, done_text: str = "Copied") -> None:
    """Show done_text on the button, then put its own text and tooltip back."""
    text, tip = button.property("restText"), button.property("restTip")
    if text is None:  # not already showing "Copied": remember what to go back to
        text, tip = button.text(), button.toolTip()
        button.setProperty("restText", text)
        button.setProperty("restTip", tip)
    button.setText(done_text)
    button.setToolTip("Copied to the clipboard")
    timer = button.findChild(QTimer, "copiedTimer")
    if timer is None:
        timer = QTimer(button)  # owned by the button: it dies with it, never fires on a deleted one
        timer.setObjectName("copiedTimer")
        timer.setSingleShot(True)
        timer.timeout.connect(lambda: _reset(button))
    timer.start(COPIED_MS)


def _reset(button):
    text, tip = button.property("restText"), button.property("restTip")
    if text is not None:
        button.setText(text)
        button.setToolTip(tip or "")
        button.setProperty("restText", None)
        button.setProperty("restTip", None)
