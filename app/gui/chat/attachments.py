"""Documents in the window: chips above the composer and the composer's size line (what a sent
message shows of them is app/gui/chat/sent_attachments.py). Extraction runs in the loop's executor (never
on the GUI thread) and token counts come from the engine. The tray plans nothing: what goes whole and
what sends passages is the one planner's (app/documents/turn.py `prepare`, as in the terminal), run
for the draft (app/gui/chat/outgoing.py) and shown here with `show_plan`."""

import asyncio
import concurrent.futures
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.attachments import keep_original
from app.core.document_block import Attachment, document_block
from app.documents import limits
from app.documents.extract import Extracted, extract
from app.documents.retrieval import Index
from app.documents.turn import TEMPLATE_SLACK, Turn, context_share, count_tokens, index_of
from app.gui import tooltips
from app.gui.chat.chip_label import ElidingLabel
from app.gui.icons import icon
from engine.context.policy import reply_room
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import DEFAULT_MAX_TOKENS, GenerationParams

KIND_NAMES = {"pdf": "PDF", "docx": "DOCX", "text": "text"}
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
    read: bool = False  # in the conversation's cache (read ahead by engine.prefill): asking computes the question
    whole: bool = True  # goes whole: the draft's plan says so (show_plan); until one, it fits alone

    @property
    def too_big(self) -> bool:
        return bool(self.limit) and not self.whole


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
        self.kind = QLabel()  # the file's type once read: PDF, DOCX or text (whatever the name says)
        self.kind.setObjectName("attachmentKind")
        self.kind.setVisible(False)
        self.name = ElidingLabel(Path(doc.path).name)  # both elide in a narrow composer (chip_label.py)
        self.name.setObjectName("attachmentName")
        self.setToolTip(tooltips.plain(Path(doc.path).name))
        self.status = ElidingLabel("waiting…")
        self.status.setObjectName("attachmentStatus")
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setToolTip(tooltips.plain(f"Remove {Path(doc.path).name}"))
        self.remove_button.setAutoRaise(True)
        self.remove_button.clicked.connect(lambda: self.removeRequested.emit(self))
        for w in (self.icon, self.kind, self.name, self.status, self.remove_button):
            row.addWidget(w)
        row.setStretchFactor(self.status, 1)

    def show_progress(self, done: int, total: int):
        self.name.setVisible(False)  # the progress names the file
        self.kind.setVisible(False)
        self.status.setText(f"Reading {self.name.text()}… {100 * done // max(1, total)}%")
        self.status.setToolTip("")

    def show_state(self):
        doc = self.doc
        if doc.error:
            self.name.setVisible(False)  # the error names the file
            self.status.setText(doc.error)
            self.setProperty("failed", True)
        elif doc.extracted is not None:
            self.name.setVisible(True)
            self.kind.setText(KIND_NAMES.get(doc.extracted.kind, "text"))
            self.kind.setVisible(True)
            text, tip = f"{doc.tokens:,} tokens", ""
            if doc.too_big:
                text += " · too big for the context: passages per question, or × to cancel"
                tip = (
                    f"{doc.extracted.name} does not fit in the context ({doc.limit:,} tokens). Each question is sent "
                    "with the passages of it most related to the question (their pages or sections are shown "
                    "under the reply); × removes it."
                )
            elif doc.read:
                text += " · read"
                tip = "Already read into the conversation: sending computes only your question."
            self.status.setText(text)
            self.status.setToolTip(tip)
        self.setToolTip(
            tooltips.plain(f"{Path(doc.path).name}: {self.status.text()}")
        )  # the whole line, when the chip is elided
        self.style().unpolish(self)
        self.style().polish(self)


class AttachmentTray(QWidget):
    """The documents attached to the message being written; owns their extraction tasks."""

    changed = Signal()  # a document was added, read, failed or removed
    readyToRead = Signal()  # a document is ready: read the draft ahead (engine.prefill)
    status = Signal(str)  # a one-off line for the status bar (an error, a document read)
    progress = Signal(str)  # one steady line while documents are read or read ahead ("": done)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("attachmentTray")
        self.engine = lambda: None  # set by ChatPanes.wire: counts come from the engine
        self.show_sent = lambda msg_id, items: None  # set by ChatPanes.wire: documents under a sent message
        self.history = lambda: ()  # set by ChatPanes.wire: the open chat's messages (its earlier documents)
        self.params = None  # a callable returning the chat's GenerationParams
        self.stop_reading = lambda: None  # set by ChatPanes.wire: ends the draft's read-ahead
        self._progress_line = ""
        self._chips: list[AttachmentChip] = []
        self._tasks: set = set()  # qasync keeps no references to tasks
        self._draft_names: list[str] = []  # the documents the last draft planned carries passages of
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self._row = QHBoxLayout()
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        layout.addLayout(self._row)
        self.summary = QLabel()
        self.summary.setObjectName("attachmentSummary")
        self.summary.setWordWrap(True)  # on two lines in a narrow composer, never wider than it
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
                index = (e.name, e.text, e.kind, e.size, e.sha256)
                chip.doc.index = await loop.run_in_executor(_EXTRACTOR, index_of, *index)
            chip.doc.ready = True
        except ChinwagError as e:
            chip.doc.error = str(e)
        except Exception as e:  # noqa: BLE001 - a bug, not bad input: logged; the chip says so and sending is not held
            chip.doc.error = report_bug(e, f"reading {Path(chip.doc.path).name}")
        if chip not in self._chips:
            return
        chip.show_state()
        self._refresh()
        if not self.busy():
            self._say_progress("")
        doc = chip.doc
        if doc.error:
            self.status.emit(doc.error)
        elif doc.too_big and doc.extracted is not None:
            self.status.emit(
                f"{doc.extracted.name} is too big for the context ({doc.tokens:,} of {doc.limit:,} tokens): "
                "each question gets its most related passages"
            )
        if not doc.error:
            self.readyToRead.emit()

    async def _count(self, chip: AttachmentChip):
        doc, engine = chip.doc, self.engine()
        if engine is None or doc.extracted is None or getattr(engine, "current_model", None) is None:
            return
        block = document_block(Attachment(doc.extracted.name, doc.extracted.text, doc.extracted.kind))
        params = self._params()
        count = await count_tokens(engine, block, params)
        doc.tokens, doc.limit = count.tokens, count.context_limit
        # Until the draft's plan says otherwise: whole if it fits alone beside the reply's room.
        doc.whole = doc.tokens <= doc.limit - reply_room(params.max_tokens, doc.limit) - TEMPLATE_SLACK

    def recount(self):
        """The model changed: sizes are in its tokens."""
        for chip in self._chips:
            if chip.doc.extracted is not None:
                task = asyncio.ensure_future(self._recount(chip))
                self._tasks.add(task)
                task.add_done_callback(self._done)

    async def _recount(self, chip):
        chip.doc.read = False  # another model: its cache holds nothing of the document yet
        try:
            await self._count(chip)
        except ChinwagError as e:
            chip.doc.error = str(e)
        chip.show_state()
        self._refresh()

    def _progress(self, chip, done, total):
        if chip in self._chips:
            chip.show_progress(done, total)
            self._say_progress(chip.status.text())

    def _say_progress(self, text: str) -> None:
        if text != self._progress_line:
            self._progress_line = text
            self.progress.emit(text)

    def cancel_progress(self) -> None:
        """The status bar's Cancel: documents still being extracted are removed; a read-ahead ends."""
        reading = [c for c in self._chips if not c.doc.ready and not c.doc.error]
        for chip in reading:
            self._remove(chip)
        if not reading:
            self.stop_reading()
        self._say_progress("")

    def read_progress(self, held: int, total: int) -> None:
        """The draft is being read into the cache (engine.prefill): the documents in it show how far."""
        if not total:
            return
        if self._draft_names:  # documents sent as passages: their chips keep saying "too big"; the status bar tells
            self._passages_progress(", ".join(self._draft_names), held, total)
        chips = [c for c in self._chips if c.doc.ready and not c.doc.error and not c.doc.too_big]
        if chips:
            self._chips_progress(chips, held, total)

    def _passages_progress(self, names: str, held: int, total: int) -> None:
        if held >= total:
            self._say_progress("")
            self.status.emit(f"Read the passages of {names} for your question: asking computes only what you change")
        else:
            self._say_progress(f"Reading the passages of {names} for your question… {100 * held // total}%")

    def _chips_progress(self, chips: list[AttachmentChip], held: int, total: int) -> None:
        done = held >= total
        for chip in chips:
            chip.doc.read = done
            if done:
                chip.show_state()
            else:
                chip.show_progress(held, total)
        if done:
            self._say_progress("")
            self.status.emit(f"Read {', '.join(c.name.text() for c in chips)}: asking computes only your question")
        else:
            self._say_progress(chips[0].status.text())

    def read_ended(self, result) -> None:
        """A read-ahead ended (None: refused); early, for a reason other than newer work (which reports on its own)."""
        if not self.busy():
            self._say_progress("")
        if result is None or (not result.finished and result.reason != "preempted"):
            for chip in self._chips:
                if chip.doc.ready and not chip.doc.error:
                    chip.show_state()

    def _remove(self, chip):
        if chip in self._chips:
            self._chips.remove(chip)
            self._row.removeWidget(chip)
            chip.deleteLater()
            self._refresh()
            if not self.busy() and not chip.doc.ready:
                self._say_progress("")  # its extraction's line goes with it
            if self.ready_documents():  # the room it took is free: the draft is planned (and read) again
                self.readyToRead.emit()

    def clear(self):
        for chip in list(self._chips):
            self._remove(chip)

    def _params(self) -> GenerationParams:
        return self.params() if self.params is not None else GenerationParams()

    def _refresh(self):
        self.setVisible(bool(self._chips))
        ready = [c.doc for c in self._chips if c.doc.extracted is not None and not c.doc.error]
        if ready and all(d.limit for d in ready):
            self.summary.setText(summary_line(ready, self._params().max_tokens))
        else:
            self.summary.setText("")
        self.summary.setVisible(bool(self.summary.text()))
        self.changed.emit()

    # --- what a message gets ------------------------------------------------------
    def busy(self) -> bool:
        return any(not c.doc.ready and not c.doc.error for c in self._chips)

    def failed(self) -> list[str]:
        """The names of the files that could not be read (their chips say why)."""
        return [Path(c.doc.path).name for c in self._chips if c.doc.error]

    def ready_documents(self) -> list[_Doc]:
        return [c.doc for c in self._chips if c.doc.ready and not c.doc.error]

    def attached(self) -> list[Attachment]:
        """The documents ready to send, whole, as the planner takes them."""
        return [_attachment(d) for d in self.ready_documents()]

    def keep_originals(self) -> None:
        """The originals kept (0600, content-addressed) as the message is sent; ChinwagError if not."""
        for d in self.ready_documents():
            if d.extracted is not None:
                keep_original(d.extracted.sha256, d.extracted.original)

    def plan_params(self) -> GenerationParams:
        """The chat's settings that size the documents (its context cap, max tokens)."""
        return self._params()

    def show_plan(self, turn: Turn, documents: list[Attachment], question: str) -> None:
        """The draft's plan (app/documents/turn.py): which of `documents` go whole; the passages' names."""
        whole = {a.sha256 for a in turn.attachments if not a.passages}
        planned = {d.sha256 for d in documents}
        for chip in self._chips:
            d, e = chip.doc, chip.doc.extracted
            if e is None or e.sha256 not in planned or d.whole == (e.sha256 in whole):
                continue
            d.whole, d.read = e.sha256 in whole, False
            if d.ready and not d.error:
                chip.show_state()
        self._draft_names = [a.name for a in turn.attachments if a.passages] if question.strip() else []
        self._refresh()

    def sent(self, msg_id, items) -> None:
        """The message is saved: its documents show under it and the chips go."""
        self.show_sent(msg_id, items)
        self.clear()


def passages_budget(limit: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """Tokens of passages a question gets from a document too big for the context."""
    return max(0, limit - reply_room(max_tokens, limit) - TEMPLATE_SLACK) // 2  # prepare's floor for passages


def summary_line(docs, max_tokens: int = DEFAULT_MAX_TOKENS) -> str:
    """What the message will take of the context: "report.pdf 6,812 tokens · 83% of the context"."""
    limit = docs[0].limit
    whole = [d for d in docs if not d.too_big]
    big = [d for d in docs if d.too_big]
    parts, tokens = [], sum(d.tokens for d in whole)
    if whole:
        parts.append(f"{', '.join(d.extracted.name for d in whole)} {tokens:,} tokens")
    if big:
        budget = passages_budget(limit, max_tokens)
        tokens += budget
        parts.append(f"{', '.join(d.extracted.name for d in big)}: passages, up to {budget:,} tokens per question")
    return f"{' + '.join(parts)} · {context_share(tokens, limit)}"


def chat_params(store, conv_id) -> GenerationParams:
    """The open chat's generation settings (its context cap and max tokens size the documents)."""
    from app.core.settings import effective, load_defaults, params_from_settings

    try:
        conv = store.get_conversation(conv_id) if conv_id is not None else None
        return params_from_settings(effective(conv.settings if conv else None, load_defaults(store)))
    except ChinwagError:  # a chat that cannot be read or a bad stored setting: sending will say so
        return GenerationParams()


def chat_history(store, conv_id) -> list:
    """The open chat's messages (empty for a new chat)."""
    return store.get_conversation(conv_id).messages if conv_id is not None else []


def _attachment(d: _Doc) -> Attachment:
    e = d.extracted
    assert e is not None
    return Attachment(e.name, e.text, e.kind, size=e.size, sha256=e.sha256)


class FileDropFilter(QObject):
    """Files dropped anywhere on the window become attachments: installed on the application, so a
    drop on a widget that takes text (the search field, the message box) attaches the file too,
    never pasting its path."""

    def __init__(self, tray: AttachmentTray, window: QWidget, parent=None, focus: QWidget | None = None):
        super().__init__(parent)
        self.tray, self.window = tray, window
        self.focus = focus  # where typing goes after a drop: the question comes next

    def eventFilter(self, obj, event):
        kind = event.type()
        if kind not in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop):
            return False
        if not isinstance(obj, QWidget) or obj.window() is not self.window:
            return False  # another window (a dialog) or a QWindow: not ours to take
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if local_files(event.mimeData()):
                event.acceptProposedAction()
                return True
        elif kind == QEvent.Type.Drop:
            files = local_files(event.mimeData())
            if files:
                event.acceptProposedAction()
                self.tray.add_paths(files)
                if self.focus is not None:  # dropped from a file manager: the window takes the keyboard
                    self.focus.window().activateWindow()
                    self.focus.setFocus()
                return True
        return False


def local_files(mime) -> list[str]:
    if mime is None or not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and u.toLocalFile()]
