"""The "Copied" a copy button shows, reset after a moment so it never says so forever."""

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QAbstractButton

COPIED_MS = 2000


def flash_copied(button: QAbstractButton, done_text: str = "Copied", icon: str = "") -> None:
    """Show done_text (or the named icon) on the button, then put its own text, icon and
    tooltip back."""
    if button.property("restTip") is None:  # not already showing "Copied": remember what to go back to
        button.setProperty("restText", button.text())
        button.setProperty("restTip", button.toolTip())
        button.setProperty("restIcon", button.icon())
    if icon:
        from app.gui.icons import icon as make_icon

        button.setIcon(make_icon(icon, side=button.iconSize().width()))
    else:
        button.setText(done_text)
    button.setToolTip("Copied to the clipboard")
    timer = button.findChild(QTimer, "copiedTimer")
    if timer is None:
        timer = QTimer(button)  # owned by the button: it dies with it, never fires on a deleted one
        timer.setObjectName("copiedTimer")
        timer.setSingleShot(True)
        timer.timeout.connect(lambda: _reset(button))
    timer.start(COPIED_MS)


def _reset(button: QAbstractButton) -> None:
    tip = button.property("restTip")
    if tip is not None:
        button.setText(button.property("restText") or "")
        button.setToolTip(tip)
        button.setIcon(button.property("restIcon"))
        for name in ("restText", "restTip", "restIcon"):
            button.setProperty(name, None)
