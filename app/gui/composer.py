"""Where the user types. Enter sends, Shift+Enter is a newline, Esc stops the reply."""

from pathlib import Path

from PySide6.QtCore import QEvent, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui import shortcuts
from app.gui.chat.attachments import AttachmentTray, FileDropFilter, local_files
from app.gui.folders import start_folder
from app.gui.icons import set_icon
from app.gui.shortcuts import is_alt_command
from app.gui.theme import ReadingColumn

# Typing that stops this long counts as a pause: the draft is read ahead (engine.prefill).
DRAFT_PAUSE_MS = 300


class _Editor(QPlainTextEdit):
    enterPressed = Signal()
    pasted = Signal()
    filesPasted = Signal(list)  # copied (or dropped) files: attachments, not their paths as text
    upInEmpty = Signal()

    def insertFromMimeData(self, source):
        files = local_files(source)
        if files:
            self.filesPasted.emit(files)
            return
        super().insertFromMimeData(source)
        self.pasted.emit()

    def event(self, event):
        # With no typing left to undo, Ctrl/Cmd+Z goes to the window (Undo of a deleted chat).
        if (
            event.type() == QEvent.Type.ShortcutOverride
            and event.matches(QKeySequence.StandardKey.Undo)
            and not self.document().isUndoAvailable()
        ):
            event.ignore()
            return True
        return super().event(event)

    def keyPressEvent(self, event):
        key = event.key()
        if key == Qt.Key.Key_Up and not event.modifiers() and not self.document().characterCount() > 1:
            self.upInEmpty.emit()  # Up in an empty box: edit the last message (as in a terminal)
            return
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.AltModifier):
                self.insertPlainText("\n")
                return
            self.enterPressed.emit()
            return
        if is_alt_command(event):
            event.ignore()  # Alt+letter is a menu's or button's, not text
            return
        super().keyPressEvent(event)


PLACEHOLDER = "Message  (Enter to send, Shift+Enter for a new line)"
# A chat that ends with the user's message and no reply (a fork): Enter with nothing typed writes it.
PLACEHOLDER_NO_REPLY = "Enter to write the reply to your last message, or type a new one"
# While the chat's reply is being written: the next message can be typed and queued.
PLACEHOLDER_WRITING = "Your next message  (Enter queues it: sent when this reply ends)"
# This chat's message is queued: the next can be typed, and sent once the queued one has gone.
PLACEHOLDER_HELD = "Your next message  (it can be sent when the queued one has gone)"
STOP_TIP = "Stop the reply (Esc)"
STOP_QUEUED_TIP = "Cancel the queued message (Esc): it stays, without a reply"


class Composer(QWidget):
    sendRequested = Signal(str)
    stopRequested = Signal()
    editCancelled = Signal()
    draftPaused = Signal(str)  # the unsent text, when typing pauses or after a paste
    generateRequested = Signal()  # Enter (or Generate Reply) with nothing typed, after the user's last message
    editLastRequested = Signal()  # Up in the empty message box

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("composer")
        frame = QHBoxLayout(self)
        frame.setContentsMargins(12, 6, 12, 10)
        self.column = ReadingColumn()  # the same centred column as the transcript
        frame.addStretch(1)
        frame.addWidget(self.column, 1000)
        frame.addStretch(1)
        outer = QVBoxLayout(self.column)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        self.reason_label = QLabel()
        self.reason_label.setObjectName("composerReason")
        self.reason_label.setWordWrap(True)
        self.reason_label.setVisible(False)
        outer.addWidget(self.reason_label)
        edit_row = QHBoxLayout()
        self.edit_label = QLabel("Editing: sending makes a new version; the earlier one stays (‹ › on the message).")
        self.edit_label.setWordWrap(True)
        self.edit_label.setObjectName("composerEditing")
        self.cancel_edit_button = QPushButton("Cancel Edit")
        self.cancel_edit_button.clicked.connect(self.editCancelled)
        edit_row.addWidget(self.edit_label, 1)
        edit_row.addWidget(self.cancel_edit_button)
        self.edit_bar = QWidget()
        self.edit_bar.setLayout(edit_row)
        edit_row.setContentsMargins(0, 0, 0, 0)
        self.edit_bar.setVisible(False)
        outer.addWidget(self.edit_bar)
        self.attachments = AttachmentTray()  # documents for the next message (app/gui/chat/attachments.py)
        outer.addWidget(self.attachments)
        self._drop_filter: FileDropFilter | None = None
        self._attach_folder = ""  # where the attach dialog opens next
        row = QHBoxLayout()
        self.attach_button = QToolButton()
        set_icon(self.attach_button, "attach")
        self.attach_button.setAutoRaise(True)
        self.attach_button.setAccessibleName("Attach files")
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setToolTip(
            f"Attach files: text, PDF or DOCX ({shortcuts.key_text(shortcuts.ATTACH)}, or drop them on the window)"
        )
        self.attach_button.clicked.connect(self.choose_files)
        row.addWidget(self.attach_button)
        self.editor = _Editor()
        self.editor.setObjectName("composerEdit")
        self.editor.setPlaceholderText(PLACEHOLDER)
        self.editor.setTabChangesFocus(True)
        self.editor.enterPressed.connect(self.submit)
        self.editor.upInEmpty.connect(self.editLastRequested)
        self.editor.installEventFilter(self)
        self.editor.textChanged.connect(self._update_buttons)
        self.editor.textChanged.connect(self._fit)
        self._pause = QTimer(self)
        self._pause.setSingleShot(True)
        self._pause.setInterval(DRAFT_PAUSE_MS)
        self._pause.timeout.connect(self._draft_paused)
        self.editor.textChanged.connect(self._pause.start)
        self.editor.pasted.connect(self._draft_paused)
        self.editor.filesPasted.connect(self.attachments.add_paths)
        self.attachments.changed.connect(self._update_buttons)
        self.attachments.changed.connect(self._show_reason)
        row.addWidget(self.editor, 1)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.setDefault(True)
        self.send_button.clicked.connect(self.submit)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip(STOP_TIP)
        self.stop_button.clicked.connect(self.stopRequested)
        self.stop_button.setVisible(False)
        row.addWidget(self.send_button)
        row.addWidget(self.stop_button)
        outer.addLayout(row)
        self._ready = True
        self._queue = False  # not ready, but a message sent now waits for the model
        self._generating = False
        self._waiting = ""  # why sending is held (this chat's message is queued)
        self._behind = ""  # why a message sent now is queued (another chat's reply is being written)
        self._reply_missing = False  # the chat's last message is the user's, with no reply yet
        self._editing = False
        self._reason = ""
        self._update_buttons()
        self._fit()

    def showEvent(self, event):
        super().showEvent(event)
        if self._drop_filter is None:  # files dropped anywhere on the window are attached
            window = self.window()
            self._drop_filter = FileDropFilter(self.attachments, window, self, focus=self.editor)
            window.setAcceptDrops(True)
            app = QApplication.instance()
            assert app is not None  # a widget is being shown: the app exists
            app.installEventFilter(self._drop_filter)  # every widget of the window
            if hasattr(window, "statusBar"):
                self.attachments.status.connect(lambda text: window.statusBar().showMessage(text, 3000))

    def choose_files(self):
        dialog = QFileDialog(self.window(), "Attach Files")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        # The folder last attached from (this run), else Documents: never wherever Chinwag was started.
        dialog.setDirectory(self._attach_folder or start_folder())
        dialog.filesSelected.connect(self.attachments.add_paths)
        dialog.filesSelected.connect(lambda files: setattr(self, "_attach_folder", str(Path(files[0]).parent)))
        dialog.finished.connect(dialog.deleteLater)
        dialog.finished.connect(lambda *_: self.editor.setFocus())  # back to typing
        dialog.open()  # never a nested event loop
        return dialog

    def eventFilter(self, obj, event):
        if obj is self.editor and event.type() == QEvent.Type.FontChange:
            QTimer.singleShot(0, self._fit)  # Preferences' font size: room for two lines of it
        elif (
            obj is self.editor
            and event.type() == QEvent.Type.Resize
            and event.size().width() != event.oldSize().width()
        ):
            QTimer.singleShot(0, self._fit)  # narrower: the placeholder may wrap to one more line
        return super().eventFilter(obj, event)

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() in (
            QEvent.Type.PaletteChange,
            QEvent.Type.ApplicationPaletteChange,
            QEvent.Type.FontChange,
            QEvent.Type.ApplicationFontChange,
        ):
            set_icon(self.attach_button, "attach")  # drawn in the new theme's text colour, at the new size

    def _fit(self):
        """Grow with the text from 2 to 8 lines; longer text scrolls."""
        line = self.editor.fontMetrics().lineSpacing()
        lines = min(8, max(2, int(self.editor.document().size().height()), self._placeholder_lines(line)))
        frame = self.editor.height() - self.editor.viewport().height()  # border and padding (style sheet)
        height = lines * line + 2 * int(self.editor.document().documentMargin()) + max(frame, 8) + 4  # + rounding
        if height != self.editor.height():
            self.editor.setFixedHeight(height)

    def _placeholder_lines(self, line: int) -> int:
        """The lines the placeholder wraps to while the box is empty (a big font, a narrow window)."""
        if self.editor.document().characterCount() > 1:
            return 0
        # QPlainTextEdit draws it in the viewport less the document margin on the left and top only
        width = max(1, self.editor.viewport().width() - int(self.editor.document().documentMargin()))
        box = QRect(0, 0, width, 100 * line)
        height = (
            self.editor.fontMetrics()
            .boundingRect(box, Qt.TextFlag.TextWordWrap, self.editor.placeholderText())
            .height()
        )
        return round(height / line)  # lineSpacing() is rounded down: 3 lines can measure 3.1 of them

    def text(self) -> str:
        return self.editor.toPlainText()

    def set_text(self, text: str):
        self.editor.setPlainText(text)
        self.editor.moveCursor(self.editor.textCursor().MoveOperation.End)
        self.editor.setFocus()

    def set_draft(self, text: str):
        """Show a saved draft without taking the focus."""
        if text != self.text():
            self.editor.setPlainText(text)
            self.editor.moveCursor(self.editor.textCursor().MoveOperation.End)

    def _draft_paused(self):
        self._pause.stop()
        if self.text().strip():
            self.draftPaused.emit(self.text())

    def submit(self):
        text = self.text()
        if self._can_generate():
            self.generateRequested.emit()
            return
        # While a reply is written (here or elsewhere) the message is queued by the controller.
        if not (self._ready or self._queue) or self._waiting or not text.strip():
            return
        if self.attachments.busy() or self.attachments.failed():  # sent once every document is read, or removed
            return
        self.editor.clear()
        self._pause.stop()  # the text is sent, not a draft any more
        self.sendRequested.emit(text)

    def set_ready(self, ready: bool, reason: str = "", queue: bool = False):
        """Enable sending, or disable it and show why (no model loaded, still loading...).

        queue: not ready yet, but a message sent now is queued and sent when it is.
        """
        # Typing ahead stays possible; sending waits for a model.
        self._ready = ready
        self._queue = queue and not ready
        self._reason = reason if not ready else ""
        self._show_reason()
        self._update_buttons()

    def set_waiting(self, reason: str):
        """Hold sending (and say why) while something else finishes; "" lets it go."""
        self._waiting = reason
        self._show_reason()
        self._update_buttons()

    def set_behind(self, reason: str):
        """A message sent now is queued behind another chat's reply (say why; Send reads Queue); "": not."""
        self._behind = reason
        self._show_reason()
        self._update_buttons()

    def _show_reason(self):
        text = self._waiting or self._behind or self._reason or self._failed_reason()
        self.reason_label.setText(text)
        self.reason_label.setVisible(bool(text))

    def _failed_reason(self) -> str:
        """A file that could not be read is never left out silently: sending waits until it is removed."""
        names = self.attachments.failed()
        if not names:
            return ""
        if len(names) == 1:
            return f"{names[0]} could not be read: remove it (×) to send your message without it."
        return f"{len(names)} files could not be read: remove them (×) to send your message without them."

    def set_generating(self, on: bool, cancels_queued: bool = False):
        """Stop instead of Send: a reply is being written here (Enter queues the next message), or
        (cancels_queued) this chat's message waits and Stop takes it off the queue."""
        self._generating = on
        self.stop_button.setVisible(on)
        self.stop_button.setToolTip(STOP_QUEUED_TIP if cancels_queued else STOP_TIP)
        self.send_button.setVisible(not on)
        self._update_buttons()

    def set_editing(self, on: bool):
        self.edit_bar.setVisible(on)
        self._editing = on
        self._update_buttons()

    def set_reply_missing(self, on: bool):
        """The chat ends with the user's message and no reply (a fork): Enter with nothing typed writes it."""
        self._reply_missing = on
        self._update_buttons()

    def _show_placeholder(self):
        if self._waiting:
            text = PLACEHOLDER_HELD
        elif self._generating:
            text = PLACEHOLDER_WRITING
        else:
            text = PLACEHOLDER_NO_REPLY if self._reply_missing else PLACEHOLDER
        if text != self.editor.placeholderText():
            self.editor.setPlaceholderText(text)
            self.editor.viewport().update()  # Qt repaints a placeholder only when it appears or goes
            self._fit()  # a longer one may need another line

    def _can_generate(self) -> bool:
        return (
            self._reply_missing
            and self._ready
            and not (self._generating or self._waiting or self._editing)
            and not self.text().strip()
            and not (self.attachments.busy() or self.attachments.ready_documents() or self.attachments.failed())
        )

    def is_ready(self) -> bool:
        return self._ready

    def can_queue(self) -> bool:
        return self._queue

    def _update_buttons(self):
        self._show_placeholder()
        generate = self._can_generate()
        if generate:
            self.send_button.setText("Generate Reply")
            self.send_button.setToolTip("Write the reply to your last message (Enter)")
        else:
            tip = "Sent as soon as the model is ready" if self._queue else "Send (Enter)"
            tip = "Sent when the other chat's reply ends (Enter)" if self._behind else tip
            self.send_button.setText("Queue" if self._queue or self._behind else "Send")
            self.send_button.setToolTip(tip)
        self.send_button.setEnabled(
            generate
            or (self._ready or self._queue)
            and not self._generating
            and not self._waiting
            and bool(self.text().strip())
            and not self.attachments.busy()
            and not self.attachments.failed()
        )
