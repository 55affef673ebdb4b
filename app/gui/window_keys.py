"""The window's keyboard side: focus, the Edit menu's actions, Undo, copy the last reply, the
chat list toggle, and the Keyboard Shortcuts sheet. Composed into MainWindow: WindowKeys owns
the chat list toggle's action and reaches only the widgets it is given."""

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QVBoxLayout,
)

from app.core.store import MessageRole
from app.gui.shortcuts import SHEET, TOGGLE_SIDEBAR, key_text


class ShortcutsDialog(QDialog):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("shortcutsDialog")
        self.setWindowTitle("Keyboard Shortcuts")
        layout = QVBoxLayout(self)
        grid = QGridLayout()
        grid.setHorizontalSpacing(24)
        self.rows = []
        for i, (what, key) in enumerate(SHEET):
            key_label = QLabel(key_text(key))
            key_label.setObjectName("shortcutKey")
            grid.addWidget(key_label, i, 0)
            grid.addWidget(QLabel(what), i, 1)
            self.rows.append((key_label.text(), what))
        layout.addLayout(grid)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)


class WindowKeys(QObject):
    def __init__(self, window, composer, sidebar, chat_view, chat, status):
        super().__init__(window)
        self.window, self.composer, self.sidebar = window, composer, sidebar
        self.chat_view, self.chat, self.status = chat_view, chat, status
        # View › Show Chat List: checked while the list shows.
        self.sidebar_action = QAction("Show Chat List", window)
        self.sidebar_action.setObjectName("Show Chat List")
        self.sidebar_action.setShortcut(QKeySequence(TOGGLE_SIDEBAR))
        self.sidebar_action.setCheckable(True)
        self.sidebar_action.setChecked(True)
        self.sidebar_action.triggered.connect(lambda _checked=False: self.toggle_sidebar())

    def toggle_sidebar(self):
        shown = self.sidebar.isHidden()
        self.sidebar.setVisible(shown)
        self.sidebar_action.setChecked(shown)
        if not shown:
            self.focus_composer()

    def step_chat(self, step: int) -> bool:
        """Open the next (+1) or previous (-1) chat in the list, round the ends (Ctrl+Tab, Ctrl+PgDn)."""
        ids = self.sidebar.ids()
        if not ids:
            return False
        current = self.chat.conv_id
        if current in ids:
            target = ids[(ids.index(current) + step) % len(ids)]
        else:  # a new chat, not in the list yet: the first chat (or the last, going back)
            target = ids[0] if step > 0 else ids[-1]
        if target == current:
            return False
        self.chat.open_conversation(target)
        self.focus_composer()
        return True

    # --- focus and the Edit menu -------------------------------------------
    def focus_composer(self):
        self.composer.editor.setFocus(Qt.FocusReason.OtherFocusReason)

    def focus_after_switch(self):
        """After a chat opens, typing goes to the composer (unless the user is in the list or search)."""
        if self.window.focusWidget() not in (self.sidebar.list, self.sidebar.search):
            self.focus_composer()

    def undo(self):
        """Undo typing in the focused field if it has any; otherwise bring back the last deleted chat."""
        focused = QApplication.focusWidget()
        if isinstance(focused, QLineEdit) and focused.isUndoAvailable():
            focused.undo()
        elif isinstance(focused, (QPlainTextEdit, QTextEdit)) and focused.document().isUndoAvailable():
            focused.undo()
        elif self.chat.undo_last_delete():
            self.window.notices.dismiss("undo")  # the chat is back: its Undo offer is done
        else:
            self.status.showMessage("Nothing to undo", 3000)

    @staticmethod
    def edit_focused(name: str):
        """Cut/Copy/Paste/Select All on the focused text (the menu's own entries)."""
        focused = QApplication.focusWidget()
        slot = {"Cut": "cut", "Copy": "copy", "Paste": "paste", "Select All": "selectAll"}[name]
        if isinstance(focused, (QLineEdit, QPlainTextEdit, QTextEdit)):
            getattr(focused, slot)()

    def copy_last_reply(self) -> bool:
        replies = [w for w in self.chat_view.message_widgets() if w.role == MessageRole.ASSISTANT]
        if not replies:
            self.status.showMessage("There is no reply to copy yet", 3000)
            return False
        self.chat.copy_message(replies[-1].message_id)
        replies[-1].show_copied()
        self.status.showMessage("Copied the last reply", 3000)
        return True
