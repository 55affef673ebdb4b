"""The documents shown on a sent message (click reads the text, right-click opens the original) and, under
a reply, the passages of a too-big document it was given."""

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QMenu, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.core.attachments import StoredAttachment, openable_copy, original_path
from app.documents.retrieval import references
from app.gui import tooltips
from app.gui.icons import icon


class MessageAttachments(QWidget):
    """The documents of a sent message: click shows the extracted text; right-click opens the original."""

    def __init__(self, items: Sequence[StoredAttachment], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageAttachments")
        self.items = list(items)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.buttons = []
        for item in items:
            button = QPushButton(icon("document"), item.name)
            button.setObjectName("messageAttachment")
            button.setFlat(True)
            note = " (the passages related to the question were sent)" if item.passages else ""
            button.setToolTip(tooltips.plain(f"{item.name}: {item.size:,} bytes{note}. Click to read the text."))
            button.clicked.connect(lambda _=False, a=item: self.show_text(a))
            button.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            button.customContextMenuRequested.connect(lambda pos, a=item, b=button: self._menu(a, b, pos))
            row.addWidget(button)
            self.buttons.append(button)
        row.addStretch(1)
        self._dialogs: list[QDialog] = []

    def show_text(self, item: StoredAttachment) -> QDialog:
        dialog = QDialog(self.window())
        dialog.setWindowTitle(item.name)
        layout = QVBoxLayout(dialog)
        view = QPlainTextEdit(item.passages or item.text)
        view.setReadOnly(True)
        layout.addWidget(view)
        dialog.resize(640, 480)
        self._dialogs.append(dialog)
        dialog.finished.connect(lambda *_: self._dialogs.remove(dialog) if dialog in self._dialogs else None)
        dialog.open()  # never a nested event loop
        return dialog

    def context_menu(self, item: StoredAttachment, parent: QWidget | None = None) -> QMenu:
        """Open the original (kept 0600 in the data directory) or copy the extracted text."""
        from PySide6.QtGui import QGuiApplication

        menu = QMenu(parent or self)
        original = original_path(item.sha256)
        open_action = menu.addAction("Open the Original")
        open_action.setEnabled(original is not None)
        if original is None:
            open_action.setToolTip("The original is no longer kept (the disk budget for originals was reached)")
        open_action.triggered.connect(lambda: self.open_original(item))
        menu.addAction("Copy the Text").triggered.connect(lambda: QGuiApplication.clipboard().setText(item.text))
        menu.addAction("Show the Text").triggered.connect(lambda: self.show_text(item))
        return menu

    def open_original(self, item: StoredAttachment) -> bool:
        """Open a copy of the original, named as it was, in the desktop's app for it."""
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        try:
            copy = openable_copy(item.sha256, item.name)
        except OSError as e:
            window = self.window()
            if hasattr(window, "statusBar"):
                window.statusBar().showMessage(f"cannot open {item.name}: {e.strerror or e}", 5000)
            return False
        return copy is not None and QDesktopServices.openUrl(QUrl.fromLocalFile(str(copy)))

    def _menu(self, item: StoredAttachment, button: QPushButton, pos: QPoint) -> None:
        self.context_menu(item, button).popup(button.mapToGlobal(pos))


def show_on_message(widget: QWidget | None, items: Sequence[StoredAttachment]) -> None:
    """Put a sent message's documents under its text (nothing if it has none)."""
    layout = widget.layout() if widget is not None else None
    if not items or widget is None or layout is None or widget.findChild(MessageAttachments) is not None:
        return
    layout.addWidget(MessageAttachments(items, widget))


def passages_used(items: Sequence[StoredAttachment]) -> str:
    """What a reply was given of documents too big for the context: "big.pdf: page 3, page 7"."""
    parts = []
    for item in items:
        refs = references(item.passages) if getattr(item, "passages", "") else []
        refs = list(dict.fromkeys(refs))  # a long page gives several chunks: named once
        if refs:
            parts.append(f"{item.name}: {', '.join(refs)}")
    return "; ".join(parts)


def show_passages_used(reply: Any, previous: Any) -> None:
    """Under a reply, the passages of the documents it was given (those on the user message before it)."""
    if reply is None or previous is None or reply.role == previous.role or reply.findChild(QLabel, "passagesUsed"):
        return
    shown = previous.findChild(MessageAttachments)
    used = passages_used(shown.items) if shown is not None else ""
    if not used:
        return
    label = QLabel(f"Passages used: {used}")
    label.setObjectName("passagesUsed")
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setToolTip("The document was too big for the context: the reply was given these passages of it")
    reply.layout().addWidget(label)
