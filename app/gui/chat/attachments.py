"""Documents in the window: chips above the composer and the composer's size line (what a sent
message shows of them is app/gui/chat/sent_attachments.py). Extraction runs in the loop's executor (never on the GUI thread) and token
counts come from the engine; app/documents does the work, this module only shows it."""

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

from app.core.attachments import StoredAttachment, keep_original
from app.core.document_block import Attachment, document_block, message_content
from app.documents import limits
from app.documents.extract import Extracted, extract
from app.documents.index_cache import IndexCache
from app.documents.retrieval import Index
from app.documents.turn import CHARS_PER_TOKEN, context_share
from app.gui.chat.chip_label import ElidingLabel
from app.gui.icons import icon
from engine.context.policy import reply_room
from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import DEFAULT_MAX_TOKENS, GenerationParams

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
    read: bool = False  # in the conversation's cache (read ahead by engine.prefill): asking computes the question
    whole: bool = True  # fits whole beside the documents attached before it (AttachmentTray._plan decides)

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
        self.setToolTip(Path(doc.path).name)
        self.status = ElidingLabel("waiting…")
        self.status.setObjectName("attachmentStatus")
        self.remove_button = QToolButton()
        self.remove_button.setText("×")
        self.remove_button.setToolTip(f"Remove {Path(doc.path).name}")
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
        self.setToolTip(f"{Path(doc.path).name}: {self.status.text()}")  # the whole line, when the chip is elided
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
        self._draft_passages = False  # the last draft read ahead carries passages for its question
        self._draft_names: list[str] = []  # a follow-up's: the chat's documents it has passages of
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
            self._plan()
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
        count = await engine.count_tokens(block, self._params())
        doc.tokens, doc.limit = count.tokens, count.context_limit

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
        chips = [c for c in self._chips if c.doc.ready and not c.doc.error and not c.doc.too_big]
        big = [c.name.text() for c in self._chips if c.doc.ready and not c.doc.error and c.doc.too_big]
        big = big or (self._draft_names if self._draft_passages else [])
        if big and self._draft_passages and total:  # the chips keep saying "too big": the status bar tells
            names = ", ".join(big)
            if held >= total:
                self._say_progress("")
                self.status.emit(
                    f"Read the passages of {names} for your question: asking computes only what you change"
                )
            else:
                self._say_progress(f"Reading the passages of {names} for your question… {100 * held // total}%")
        if not chips or not total:
            return
        if held >= total:
            for chip in chips:
                chip.doc.read = True
                chip.show_state()
            names = ", ".join(c.name.text() for c in chips)
            self._say_progress("")
            self.status.emit(f"Read {names}: asking computes only your question")
            return
        for chip in chips:
            chip.doc.read = False
            chip.show_progress(held, total)
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

    def clear(self):
        for chip in list(self._chips):
            self._remove(chip)

    def _params(self) -> GenerationParams:
        return self.params() if self.params is not None else GenerationParams()

    def _plan(self) -> bool:
        """Which documents go whole: in the order attached, each one while the message (with the
        ones before it, the question and room for the reply) still fits the context; the rest send
        passages. True if one became whole (it can be read ahead now)."""
        max_tokens, used, grew = self._params().max_tokens, 0, False
        for chip in self._chips:
            d = chip.doc
            if d.extracted is None or d.error or not d.limit:
                continue
            room = d.limit - reply_room(max_tokens, d.limit) - QUESTION_ROOM
            was, d.whole = d.whole, used + d.tokens <= room
            used += d.tokens if d.whole else 0
            if was != d.whole:
                grew = grew or d.whole
                d.read = False
                if d.ready:
                    chip.show_state()
        return grew

    def _refresh(self):
        self.setVisible(bool(self._chips))
        grew = self._plan()
        ready = [c.doc for c in self._chips if c.doc.extracted is not None and not c.doc.error]
        if ready and all(d.limit for d in ready):
            self.summary.setText(summary_line(ready, self._params().max_tokens))
        else:
            self.summary.setText("")
        self.summary.setVisible(bool(self.summary.text()))
        self.changed.emit()
        if grew:  # a removal left room: the document that now fits whole is read ahead
            self.readyToRead.emit()

    # --- what a message gets ------------------------------------------------------
    def busy(self) -> bool:
        return any(not c.doc.ready and not c.doc.error for c in self._chips)

    def failed(self) -> list[str]:
        """The names of the files that could not be read (their chips say why)."""
        return [Path(c.doc.path).name for c in self._chips if c.doc.error]

    def ready_documents(self) -> list[_Doc]:
        return [c.doc for c in self._chips if c.doc.ready and not c.doc.error]

    def draft_text(self, question: str) -> str:
        """The draft as the engine reads it ahead: what sending it now would send. Documents too big
        for the context give the passages for the question typed so far (the same pick as sending
        it: a question left as it was when typing paused is all that is left to compute)."""
        docs = self.ready_documents()
        self._draft_passages = False
        if not docs:
            return self._followup_draft(question) or question
        if question.strip() and any(d.too_big for d in docs):
            try:
                text = message_content(question, [s.for_message() for s in self.stored(question)])
                self._draft_passages = True
                return text
            except ChinwagError:  # no passage fits: sending will say so; read the whole ones ahead
                pass
        return message_content(question, [_attachment(d) for d in docs if not d.too_big])

    def stored(self, question: str) -> list[StoredAttachment]:
        """The documents to save with the message; one too big for the context keeps the passages
        most related to the question (sized with the document's own characters per token)."""
        out, max_tokens = [], self._params().max_tokens
        for d in self.ready_documents():
            e = d.extracted
            assert e is not None
            passages = ""
            if d.too_big:
                free = passages_budget(d.limit, max_tokens)
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
        return self.stored(question) or self._followups(history, question, context_limit)

    def _followups(self, history, question: str, context_limit: int) -> list[StoredAttachment]:
        params = self._params()  # the chat's context cap bounds the passages, as it bounds the chips
        limit = min(context_limit, params.context_cap or context_limit)
        return followup_passages(history, question, limit, params.max_tokens)

    def _followup_draft(self, question: str) -> str | None:
        """A follow-up's draft in a chat whose documents were too big: with its own passages, as sent."""
        engine = self.engine()
        model = getattr(engine, "current_model", None)
        if model is None or not question.strip():
            return None
        try:
            items = self._followups(self.history(), question, model.context_length or 0)
        except ChinwagError:  # the chat cannot be read: sending will say so
            return None
        if not items:
            return None
        self._draft_passages, self._draft_names = True, [s.name for s in items]
        return message_content(question, [s.for_message() for s in items])


def passages_budget(limit: int, max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """Tokens of passages a question gets from a document too big for the context."""
    return max(0, limit - reply_room(max_tokens, limit) - QUESTION_ROOM) // 2


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


_INDEXES = IndexCache()  # the big documents' indexes: built once per document, the least recently used go


def followup_passages(
    history, question: str, context_limit: int, max_tokens: int = DEFAULT_MAX_TOKENS
) -> list[StoredAttachment]:
    """Passages for a follow-up from the documents of `history` that were sent as passages (those
    that no earlier message holds: the chat's messages are sent with it)."""
    big: dict[str, StoredAttachment] = {}
    sent = []
    for m in history:
        for a in getattr(m, "attachments", ()):
            sent.append(a.passages)
            if a.passages and a.sha256 not in big:
                big[a.sha256] = a
    if not big or not context_limit:
        return []
    free = max(0, context_limit - reply_room(max_tokens, context_limit) - QUESTION_ROOM) // 2 // len(big)
    out = []
    for a in big.values():
        index = _INDEXES.get(a.sha256, a.name, a.text, a.kind)
        passages = index.passages(question, free * CHARS_PER_TOKEN, "\n".join(sent))[0].text
        if passages:
            out.append(StoredAttachment(a.name, a.kind, a.size, a.sha256, a.text, passages))
    return out


def _attachment(d: _Doc) -> Attachment:
    e = d.extracted
    assert e is not None
    return Attachment(e.name, e.text, e.kind)


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
