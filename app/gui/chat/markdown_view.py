"""Markdown for one message, re-rendered block by block.

`split_blocks` (app/transcripts/blocks.py, no Qt) cuts a reply into prose, fenced code and `<think>` blocks.
`MarkdownView` keeps one widget per block and, on every update, re-renders only the
blocks whose text changed: while a reply streams that is the last one, so an update
costs the size of the last paragraph, not of the whole reply.
"""

import time

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import (
    QFont,
    QFontDatabase,
    QGuiApplication,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextOption,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.gui.chat import line_breaks
from app.gui.highlight_qt import SpanHighlighter, is_dark
from app.transcripts.blocks import Block, merge_prose, split_blocks
from app.transcripts.highlight import resolve_language, spans

MD_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)

# A live code block re-highlights only after this many times its last highlight's cost.
HIGHLIGHT_COST_FACTOR = 10
# A message's layout: the space between its block widgets, a prose view's margin and the room
# below its text. A finished message's prose is one document: its chunks keep the same distance.
BLOCK_SPACING, DOC_MARGIN, FIT_PAD = 6, 2, 2
CHUNK_GAP = FIT_PAD + 2 * DOC_MARGIN + BLOCK_SPACING


SAFE_SCHEMES = ("http", "https", "mailto")


def open_link(url) -> bool:
    if url.scheme().lower() not in SAFE_SCHEMES:
        return False
    from PySide6.QtGui import QDesktopServices

    return QDesktopServices.openUrl(url)


def mono_font():
    """The system's fixed-pitch family at the window's text size (Preferences' font size)."""
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.TypeWriter)
    size = QGuiApplication.font()
    if size.pointSizeF() > 0:
        font.setPointSizeF(size.pointSizeF())
    elif size.pixelSize() > 0:
        font.setPixelSize(size.pixelSize())
    return font


def _monospace_code_spans(doc: QTextDocument):
    """Qt marks `code` spans with the family name "monospace" only; make them really fixed-pitch."""
    spans = []
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.isValid() and frag.charFormat().fontFixedPitch():
                spans.append((frag.position(), frag.length()))
            it += 1
        block = block.next()
    if not spans:
        return
    fmt = QTextCharFormat()
    fmt.setFontFamilies([mono_font().family()])
    fmt.setFontStyleHint(QFont.StyleHint.TypeWriter)
    fmt.setFontFixedPitch(True)
    fmt.setBackground(QGuiApplication.palette().color(QPalette.ColorRole.AlternateBase))
    cursor = QTextCursor(doc)
    for pos, length in spans:
        cursor.setPosition(pos)
        cursor.setPosition(pos + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)


def _style_quotes_and_lists(doc: QTextDocument):
    """Blockquotes: indented on a tinted band as wide as the text, in a dimmed colour; lists: room between items."""
    palette = QGuiApplication.palette()
    block = doc.begin()
    cursor = QTextCursor(doc)
    while block.isValid():
        fmt = block.blockFormat()
        level = int(fmt.property(QTextFormat.Property.BlockQuoteLevel) or 0)
        changed = False
        if level:
            fmt.setLeftMargin(14 * level)
            fmt.setRightMargin(0)  # Qt's importer keeps 40 px on the right: the band would stop short of the text
            fmt.setBackground(palette.color(QPalette.ColorRole.AlternateBase))
            fmt.setTopMargin(2)
            fmt.setBottomMargin(2)
            changed = True
            text = QTextCharFormat()
            text.setForeground(palette.color(QPalette.ColorRole.PlaceholderText))
            cursor.setPosition(block.position())
            cursor.setPosition(block.position() + max(0, block.length() - 1), QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(text)
        elif block.textList() is not None:
            fmt.setBottomMargin(3)
            changed = True
        if changed:
            cursor.setPosition(block.position())
            cursor.setBlockFormat(fmt)
        block = block.next()


def _space_chunks(doc: QTextDocument, chunks: tuple) -> None:
    """Put CHUNK_GAP above the first block of every chunk but the first (found by rendering each alone)."""
    cursor, n = QTextCursor(doc), 0
    for chunk in chunks[:-1]:
        alone = QTextDocument()  # its blocks are counted: the marks need not become line breaks
        alone.setMarkdown(line_breaks.mark_soft_breaks(chunk), MD_FEATURES)
        n += alone.blockCount()
        block = doc.findBlockByNumber(n)
        if not block.isValid():
            return
        fmt = block.blockFormat()
        fmt.setTopMargin(CHUNK_GAP)
        cursor.setPosition(block.position())
        cursor.setBlockFormat(fmt)


class ProseView(QTextBrowser):
    """A borderless, self-sizing rich text view: its height follows its text."""

    def __init__(self, parent=None, dim=False):
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # Links from a model open in the browser only if they are web or mail links; the
        # view never navigates itself and never loads files or images a reply points at.
        self.setOpenLinks(False)
        self.anchorClicked.connect(open_link)
        self.viewport().setAutoFillBackground(False)
        self.setAutoFillBackground(False)
        self.document().setDocumentMargin(DOC_MARGIN)
        option = self.document().defaultTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().setDefaultTextOption(option)
        if dim:
            self.setObjectName("thinkText")
            pal = self.palette()
            pal.setColor(QPalette.ColorRole.Text, QGuiApplication.palette().color(QPalette.ColorRole.PlaceholderText))
            self.setPalette(pal)
        self.setFixedHeight(self._doc_height(400))
        self._source = None

    def loadResource(self, kind, url):
        return None

    def set_markdown(self, text: str, chunks: tuple = ()):
        """Show markdown; `chunks`: the prose chunks `text` joins (a finished message), each set
        CHUNK_GAP below the one before, as they stand while the message streams."""
        if (text, chunks) == self._source:
            return
        self._source = (text, chunks)
        doc = self.document()
        line_breaks.set_markdown(doc, text, MD_FEATURES)
        # One layout for all the formatting: edits one by one re-lay the shown document each time
        # (a 3,000-line quote took 53 s).
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        _monospace_code_spans(doc)
        _style_quotes_and_lists(doc)
        _space_chunks(doc, chunks)
        cursor.endEditBlock()
        self._fit()

    def set_plain(self, text: str):
        if text == self._source:
            return
        self._source = text
        self.setPlainText(text)
        self._fit()

    def _doc_height(self, width: int) -> int:
        doc = self.document()
        doc.setTextWidth(max(width, 50))
        return int(doc.size().height()) + FIT_PAD

    def _fit(self):
        width = self.viewport().width() if self.isVisible() else max(self.width(), 400)
        h = self._doc_height(width)
        if h != self.height():
            self.setFixedHeight(h)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self._fit()

    def wheelEvent(self, event):
        event.ignore()  # let the chat view scroll

    def context_menu(self, pos):
        """Qt's Copy/Select All, then the actions of the message this text belongs to."""
        menu = self.createStandardContextMenu(pos)
        for action in menu.actions():  # "Copy Link Location" only over a link, never greyed out
            if action.objectName() == "link-copy" and not action.isEnabled():
                menu.removeAction(action)
        owner = self.parent()
        while owner is not None and not hasattr(owner, "extend_context_menu"):
            owner = owner.parent()
        if owner is not None:
            owner.extend_context_menu(menu)
        return menu

    def contextMenuEvent(self, event):
        menu = self.context_menu(event.pos())
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        menu.popup(event.globalPos())


class _CodeEditor(QPlainTextEdit):
    """A code block's text: the wheel scrolls the chat, not the block (it is as tall as its text)."""

    def wheelEvent(self, event):
        event.ignore()


class CodeBlock(QFrame):
    """A fenced code block: monospace, no wrapping, with a Copy button."""

    copied = Signal(str)

    def __init__(self, lang: str = "", parent=None):
        super().__init__(parent)
        self.setObjectName("codeBlock")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 6)
        layout.setSpacing(2)
        head = QHBoxLayout()
        self.lang_label = QLabel(lang or "code")
        self.lang_label.setObjectName("codeLang")
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setObjectName("copyCode")
        self.copy_button.setToolTip("Copy this code block")
        self.copy_button.clicked.connect(self.copy)
        head.addWidget(self.lang_label)
        head.addStretch(1)
        head.addWidget(self.copy_button)
        layout.addLayout(head)
        self.editor = _CodeEditor()
        self.editor.setObjectName("codeText")
        self.editor.setReadOnly(True)
        self.editor.setFont(mono_font())
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.editor.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.editor.setFrameShape(QFrame.Shape.NoFrame)
        layout.addWidget(self.editor)
        self.highlighter = SpanHighlighter(self.editor.document())
        self.highlights = 0  # how many times the block was highlighted (for tests)
        self._lang = lang
        self._next_highlight = 0.0
        self._final = False  # highlighted as a complete block
        self._text = ""
        self._fit()

    def text(self) -> str:
        return self._text

    def set_code(self, text: str, lang: str = "", closed: bool = True):
        if lang:
            self.lang_label.setText(lang)
        self._lang = lang
        if text == self._text and (self._final or not closed):
            return
        if text.startswith(self._text) and self._text:
            cursor = self.editor.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(self._text) :])
        else:
            self.editor.setPlainText(text)
        self._text = text
        self._final = False
        self._fit()
        self._highlight(final=closed)

    def _highlight(self, final: bool):
        """Colour the code; while it streams, at most every HIGHLIGHT_COST_FACTOR× its cost,
        and a block without a language is only guessed once it is complete."""
        now = time.monotonic()
        if not final and (now < self._next_highlight or not self._lang):
            return
        started = time.perf_counter()
        lang = self._lang or resolve_language(self._text, "")
        if lang and not self._lang:
            self.lang_label.setText(lang)  # the guess, so a wrong one is visible
        self.highlighter.set_spans(spans(self._text, lang, is_dark()), self._text)
        self.highlights += 1
        self._final = final
        self._next_highlight = 0.0 if final else now + HIGHLIGHT_COST_FACTOR * (time.perf_counter() - started)

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange) and self._final:
            self._highlight(final=True)  # light ↔ dark: the other palette's colours
        if event.type() == QEvent.Type.ApplicationFontChange:
            self.editor.setFont(mono_font())  # Preferences' font size, code included
            self._fit()

    def copy(self):
        QGuiApplication.clipboard().setText(self._text)
        from app.gui.copy_feedback import flash_copied

        flash_copied(self.copy_button)  # says "Copied" for ~2 s, then "Copy" again
        self.copied.emit(self._text)

    def _fit(self):
        lines = self._text.split("\n")
        metrics = self.editor.fontMetrics()
        widest = max(metrics.horizontalAdvance(line) for line in lines[:2000])
        needs_bar = widest + 16 > self.editor.viewport().width()
        bar = self.editor.horizontalScrollBar().sizeHint().height() if needs_bar else 0
        height = len(lines) * metrics.lineSpacing() + 2 * int(self.editor.document().documentMargin()) + 4 + bar
        if height != self.editor.height():
            self.editor.setFixedHeight(height)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self._fit()


class ThinkBlock(QFrame):
    """The model's reasoning: collapsed by default, dimmed, click to expand."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("thinkBlock")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        self.toggle = QToolButton()
        self.toggle.setObjectName("thinkToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.toggled.connect(self.set_expanded)
        layout.addWidget(self.toggle)
        self.body = ProseView(dim=True)
        self.body.setVisible(False)
        layout.addWidget(self.body)
        self._text = None
        self._closed = None

    def set_think(self, text: str, closed: bool):
        if text == self._text and closed == self._closed:
            return
        self._text, self._closed = text, closed
        words = len(text.split())
        label = "Reasoning" if closed else "Thinking…"
        self.toggle.setText(f"{label} ({words} words)")
        if self.toggle.isChecked():
            self.body.set_markdown(text)

    def set_expanded(self, on: bool):
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        if on:
            self.body.set_markdown(self._text or "")
        self.body.setVisible(on)
        if on:
            self.body._fit()

    def is_expanded(self) -> bool:
        return self.toggle.isChecked()


class MarkdownView(QWidget):
    """One message's body: a column of block widgets, updated incrementally."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(BLOCK_SPACING)
        self._blocks: list[Block] = []
        self._widgets: list[QWidget] = []
        self.renders = 0  # how many block widgets were re-rendered (for tests and benches)

    def set_text(self, text: str, merge: bool = False):
        """Show text. merge=True (a finished message) renders adjacent prose as one document."""
        blocks = split_blocks(text)
        if merge:
            blocks = merge_prose(blocks)
        for i, block in enumerate(blocks):
            if i < len(self._blocks) and self._blocks[i] == block:
                continue
            if i < len(self._widgets) and self._blocks[i].kind == block.kind:
                self._render(self._widgets[i], block)
            else:
                self._truncate(i)
                widget = self._make(block)
                self._render(widget, block)
                self._widgets.append(widget)
                self._layout.addWidget(widget)
            if i < len(self._blocks):
                self._blocks[i] = block
            else:
                self._blocks.append(block)
        self._truncate(len(blocks))

    def blocks(self) -> list[Block]:
        return list(self._blocks)

    def widgets(self) -> list[QWidget]:
        return list(self._widgets)

    def _truncate(self, n: int):
        while len(self._widgets) > n:
            widget = self._widgets.pop()
            self._layout.removeWidget(widget)
            widget.deleteLater()
        del self._blocks[n:]

    def _make(self, block: Block) -> QWidget:
        if block.kind == "code":
            return CodeBlock(block.lang)
        if block.kind == "think":
            return ThinkBlock()
        return ProseView()

    def _render(self, widget, block: Block):
        self.renders += 1
        if block.kind == "code":
            widget.set_code(block.text, block.lang, block.closed)
        elif block.kind == "think":
            widget.set_think(block.text, block.closed)
        else:
            widget.set_markdown(block.text, block.parts)
