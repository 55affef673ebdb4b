"""Documents in the window: chips above the composer, the composer's size line, and the documents shown
on a sent message. Extraction runs in the loop's executor (never on the GUI thread) and token
counts come from the engine; app/documents does the work, this module only shows it."""

import asyncio
import concurrent.futures
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.attachments import StoredAttachment, keep_original, original_path
from app.documents import limits
from app.documents.block import Attachment, document_block, message_content
from app.documents.extract import Extracted, extract
from app.documents.retrieval import Index
from app.documents.turn import CHARS_PER_TOKEN
from app.gui.icons import icon
from engine.context.policy import reply_room
from engine.errors import ChinwagError
from engine.log import report_bug

KIND_NAMES = {"pdf": "PDF", "docx": "DOCX", "text": "text"}
# Room kept for the question and the template when deciding whether a document fits whole.
QUESTION_ROOM = 256
# One extraction at a time, off the GUI thread: pdfium must not be entered from two threads at once.
_EXTRACTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="chinwag-extract")


@dataclass
class _Doc:
    path: str
    extracted: Extracted | None = None
    tokens: int = 0
    limit: int = 0
    error: str = ""
    index: Index | None = None  # built off the GUI thread when the document is too big for the context
    ready: bool = False  # extracted, counted (and indexed if too big)

    @property
    def too_big(self) -> bool:
        return bool(self.limit) and self.tokens > self.limit - QUESTION_ROOM


class AttachmentChip(QFrame):
    """One document above the composer: icon, name, size in tokens (or progress, or the error), ×."""

    removeRequested = Signal(object)

    def __init__(self, doc: _Doc, parent=None):
        super().__init__(parent)
        self.doc = doc
        self.setObjectName("attachmentChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 2, 2, 2)
        self.icon = QLabel()
        self.icon.setPixmap(icon("document").pixmap(16, 16))
        self.name = QLabel(Path(doc.path).name)
        self.name.setObjectName("attachmentName")
        self.status = QLabel("waiting…")
        self.status.setObjectName("attachmentStatus")
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setToolTip(f"Remove {Path(doc.path).name}")
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.removeRequested.emit(self))
        for w in (self.icon, self.name, self.status, self.remove_button):
            row.addWidget(w)

    def show_progress(self, done: int, total: int):
        self.status.setText(f"Reading {self.name.text()}… {100 * done // max(1, total)}%")

    def show_state(self):
        doc = self.doc
        if doc.error:
            self.name.setVisible(False)  # the error names the file
            self.status.setText(doc.error)
            self.setProperty("failed", True)
        elif doc.extracted is not None:
            self.icon.setToolTip(KIND_NAMES.get(doc.extracted.kind, "text"))
            text = f"{doc.tokens:,} tokens"
            if doc.too_big:
                text += " · too big for the context: the passages most related to each question are sent (× cancels)"
            self.status.setText(text)
        self.style().unpolish(self)
        self.style().polish(self)


class AttachmentTray(QWidget):
    """The documents attached to the message being written; owns their extraction tasks."""

    changed = Signal()  # a document was added, read, failed or removed
    readyToRead = Signal()  # a document is ready: read the draft ahead (engine.prefill)
    status = Signal(str)  # progress for the status bar

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("attachmentTray")
        self.engine = lambda: None  # set by ChatPanes.wire: counts come from the engine
        self.show_sent = lambda msg_id, items: None  # set by ChatPanes.wire: documents under a sent message
        self.params = None  # a callable returning the chat's GenerationParams
        self._chips: list[AttachmentChip] = []
        self._tasks: set = set()  # qasync keeps no references to tasks
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self._row = QHBoxLayout()
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        layout.addLayout(self._row)
        self.summary = QLabel()
        self.summary.setObjectName("attachmentSummary")
        layout.addWidget(self.summary)
        self.setVisible(False)

    # --- adding ---------------------------------------------------------------
    def add_paths(self, paths) -> None:
        for path in paths:
            if len(self._chips) >= limits.MAX_FILES_PER_MESSAGE:
                self.status.emit(f"At most {limits.MAX_FILES_PER_MESSAGE} files can be attached to one message.")
                return
            chip = AttachmentChip(_Doc(str(path)), self)
            chip.removeRequested.connect(self._remove)
            self._row.insertWidget(self._row.count() - 1, chip)
            self._chips.append(chip)
            task = asyncio.ensure_future(self._read(chip))
            self._tasks.add(task)
            task.add_done_callback(self._done)
        self._refresh()

    def _done(self, task):
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            report_bug(task.exception(), "reading an attached document")

    async def _read(self, chip: AttachmentChip):
        loop = asyncio.get_running_loop()

        def progress(done, total):  # on the executor's thread: hand it to the GUI thread
            loop.call_soon_threadsafe(self._progress, chip, done, total)

        try:
            chip.doc.extracted = await loop.run_in_executor(_EXTRACTOR, extract, chip.doc.path, progress)
            await self._count(chip)
            e = chip.doc.extracted
            if chip.doc.too_big and e is not None:  # indexing a long document takes a while: not on the GUI thread
                chip.doc.index = await loop.run_in_executor(_EXTRACTOR, Index, e.name, e.text, e.kind)
            chip.doc.ready = True
        except ChinwagError as e:
            chip.doc.error = str(e)
        except Exception as e:  # noqa: BLE001 - a bug, not bad input: logged; the chip says so and sending is not held
            chip.doc.error = report_bug(e, f"reading {Path(chip.doc.path).name}")
        if chip not in self._chips:
            return
        chip.show_state()
        self._refresh()
        if not chip.doc.error:
            self.readyToRead.emit()

    async def _count(self, chip: AttachmentChip):
        doc, engine = chip.doc, self.engine()
        if engine is None or doc.extracted is None or getattr(engine, "current_model", None) is None:
            return
        block = document_block(Attachment(doc.extracted.name, doc.extracted.text, doc.extracted.kind))
        count = await engine.count_tokens(block, self.params() if self.params else None)
        doc.tokens, doc.limit = count.tokens, count.context_limit

    def recount(self):
        """The model changed: sizes are in its tokens."""
        for chip in self._chips:
            if chip.doc.extracted is not None:
                task = asyncio.ensure_future(self._recount(chip))
                self._tasks.add(task)
                task.add_done_callback(self._done)

    async def _recount(self, chip):
        try:
            await self._count(chip)
        except ChinwagError as e:
            chip.doc.error = str(e)
        chip.show_state()
        self._refresh()

    def _progress(self, chip, done, total):
        if chip in self._chips:
            chip.show_progress(done, total)
            self.status.emit(chip.status.text())

    def _remove(self, chip):
        if chip in self._chips:
            self._chips.remove(chip)
            self._row.removeWidget(chip)
            chip.deleteLater()
            self._refresh()

    def clear(self):
        for chip in list(self._chips):
            self._remove(chip)

    def _refresh(self):
        self.setVisible(bool(self._chips))
        ready = [c.doc for c in self._chips if c.doc.extracted is not None and not c.doc.error]
        if ready and all(d.limit for d in ready):
            names = ", ".join(d.extracted.name for d in ready if d.extracted)
            tokens = sum(d.tokens for d in ready)
            self.summary.setText(f"{names} {tokens:,} tokens · {100 * tokens / ready[0].limit:.0f}% of the context")
        else:
            self.summary.setText("")
        self.summary.setVisible(bool(self.summary.text()))
        self.changed.emit()

    # --- what a message gets ------------------------------------------------------
    def busy(self) -> bool:
        return any(not c.doc.ready and not c.doc.error for c in self._chips)

    def ready_documents(self) -> list[_Doc]:
        return [c.doc for c in self._chips if c.doc.ready and not c.doc.error]

    def draft_text(self, question: str) -> str:
        """The draft as the engine reads it ahead: the documents that fit whole, then the question."""
        whole = [_attachment(d) for d in self.ready_documents() if not d.too_big]
        return message_content(question, whole)

    def stored(self, question: str, max_tokens: int = 512) -> list[StoredAttachment]:
        """The documents to save with the message; one too big for the context keeps the passages
        most related to the question (sized with the document's own characters per token)."""
        out = []
        for d in self.ready_documents():
            e = d.extracted
            assert e is not None
            passages = ""
            if d.too_big:
                free = max(0, d.limit - reply_room(max_tokens, d.limit) - QUESTION_ROOM) // 2
                chars = int(free * len(e.text) / max(1, d.tokens) * 0.9)
                index = d.index or Index(e.name, e.text, e.kind)
                passages = index.passages(question, chars)[0].text
                if not passages:  # never the whole text in its place
                    raise ChinwagError(f"{e.name} is too big for the context and no passage of it fits: remove it")
            out.append(StoredAttachment(e.name, e.kind, e.size, e.sha256, e.text, passages))
        return out

    def sent(self, msg_id, items) -> None:
        """The message is saved: its documents show under it and the chips go."""
        self.show_sent(msg_id, items)
        self.clear()

    def for_sending(self, question: str, history=(), context_limit: int = 0) -> list[StoredAttachment]:
        """Keep the originals (0600, content-addressed), then what the message stores; ChinwagError if not.

        With no new document, a chat's earlier documents that were too big for the context give
        this question its own passages."""
        for d in self.ready_documents():
            if d.extracted is not None:
                keep_original(d.extracted.sha256, d.extracted.original)
        return self.stored(question) or followup_passages(history, question, context_limit)


_INDEXES: dict[str, Index] = {}  # sha256 -> its Index: built once per document per run


def followup_passages(history, question: str, context_limit: int, max_tokens: int = 512) -> list[StoredAttachment]:
    """Passages for a follow-up from the documents of `history` that were sent as passages."""
    big: dict[str, StoredAttachment] = {}
    for m in history:
        for a in getattr(m, "attachments", ()):
            if a.passages and a.sha256 not in big:
                big[a.sha256] = a
    if not big or not context_limit:
        return []
    free = max(0, context_limit - reply_room(max_tokens, context_limit) - QUESTION_ROOM) // 2 // len(big)
    out = []
    for a in big.values():
        index = _INDEXES.get(a.sha256)
        if index is None:
            index = _INDEXES[a.sha256] = Index(a.name, a.text, a.kind)
        passages = index.passages(question, free * CHARS_PER_TOKEN)[0].text
        if passages:
            out.append(StoredAttachment(a.name, a.kind, a.size, a.sha256, a.text, passages))
    return out


def _attachment(d: _Doc) -> Attachment:
    e = d.extracted
    assert e is not None
    return Attachment(e.name, e.text, e.kind)


class FileDropFilter(QObject):
    """Files dropped anywhere on the window (or pasted) become attachments."""

    def __init__(self, tray: AttachmentTray, parent=None):
        super().__init__(parent)
        self.tray = tray

    def eventFilter(self, obj, event):
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if local_files(event.mimeData()):
                event.acceptProposedAction()
                return True
        elif kind == QEvent.Type.Drop:
            files = local_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                self.tray.add_paths(files)
                return True
        return False


def local_files(mime) -> list[str]:
    if mime is None or not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]


# --- on a sent message -------------------------------------------------------------


class MessageAttachments(QWidget):
    """The documents of a sent message: click shows the extracted text; right-click opens the original."""

    def __init__(self, items, parent=None):
        super().__init__(parent)
        self.setObjectName("messageAttachments")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.buttons = []
        for item in items:
            button = QPushButton(icon("document"), item.name)
            button.setObjectName("messageAttachment")
            button.setFlat(True)
            note = " (the passages related to the question were sent)" if item.passages else ""
            button.setToolTip(f"{item.name}: {item.size:,} bytes{note}. Click to read the text.")
            button.clicked.connect(lambda _=False, a=item: self.show_text(a))
            button.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
            button.customContextMenuRequested.connect(lambda pos, a=item, b=button: self._menu(a, b, pos))
            row.addWidget(button)
            self.buttons.append(button)
        row.addStretch(1)
        self._dialogs: list = []

    def show_text(self, item) -> QDialog:
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

    def _menu(self, item, button, pos):
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices, QGuiApplication

        menu = QMenu(button)
        original = original_path(item.sha256)
        open_action = menu.addAction("Open the Original")
        open_action.setEnabled(original is not None)
        open_action.triggered.connect(lambda: QDesktopServices.openUrl(QUrl.fromLocalFile(str(original))))
        menu.addAction("Copy the Text").triggered.connect(lambda: QGuiApplication.clipboard().setText(item.text))
        menu.popup(button.mapToGlobal(pos))


def show_on_message(widget, items) -> None:
    """Put a sent message's documents under its text (nothing if it has none)."""
    if not items or widget is None or widget.findChild(MessageAttachments) is not None:
        return
    widget.layout().addWidget(MessageAttachments(items, widget))
