"""Markdown for one message, re-rendered block by block.

`split_blocks` cuts a reply into prose chunks, fenced code blocks and `<think>` blocks.
`MarkdownView` keeps one widget per block and, on every update, re-renders only the
blocks whose text changed: while a reply streams that is the last one, so an update
costs the size of the last paragraph, not of the whole reply.
"""

import re
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
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

MD_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value
    | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
_LIST_OR_INDENT = re.compile(r"^(\s+\S|[-*+]\s|\d{1,9}[.)]\s)")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Block:
    kind: str  # "prose", "code" or "think"
    text: str
    lang: str = ""
    closed: bool = True


def split_blocks(text: str) -> list[Block]:
    """Cut text into prose, code and think blocks. Unclosed fences and think tags run to the end."""
    blocks: list[Block] = []
    pos = 0
    # A reply can start inside the reasoning when the chat template opened <think> itself.
    close_first = text.find(THINK_CLOSE)
    open_first = text.find(THINK_OPEN)
    if close_first != -1 and (open_first == -1 or open_first > close_first):
        blocks.append(Block("think", text[:close_first].strip()))
        pos = close_first + len(THINK_CLOSE)
    while pos < len(text):
        start = text.find(THINK_OPEN, pos)
        if start == -1:
            blocks += _markdown_blocks(text[pos:])
            break
        blocks += _markdown_blocks(text[pos:start])
        end = text.find(THINK_CLOSE, start)
        if end == -1:
            blocks.append(Block("think", text[start + len(THINK_OPEN):].strip(), closed=False))
            break
        blocks.append(Block("think", text[start + len(THINK_OPEN):end].strip()))
        pos = end + len(THINK_CLOSE)
    return blocks


def merge_prose(blocks: list[Block]) -> list[Block]:
    """Fewer widgets for a message that will not change: one document per run of prose."""
    out: list[Block] = []
    for block in blocks:
        if block.kind == "prose" and out and out[-1].kind == "prose":
            out[-1] = Block("prose", out[-1].text + "\n\n" + block.text)
        else:
            out.append(block)
    return out


def _markdown_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    prose: list[str] = []
    code: list[str] = []
    fence = None  # (char, length, lang) while inside a fenced block

    def flush_prose():
        chunk = "\n".join(prose).strip("\n")
        if chunk.strip():
            blocks.append(Block("prose", chunk))
        prose.clear()

    for line in text.split("\n"):
        if fence is None:
            m = _FENCE.match(line)
            if m:
                flush_prose()
                fence = (m.group(1)[0], len(m.group(1)), m.group(2))
                continue
            if prose and _starts_new_chunk(prose, line):
                flush_prose()
            prose.append(line)
        else:
            stripped = line.strip()
            if (
                len(line) - len(line.lstrip(" ")) <= 3
                and stripped
                and set(stripped) == {fence[0]}
                and len(stripped) >= fence[1]
            ):
                blocks.append(Block("code", "\n".join(code), fence[2]))
                code.clear()
                fence = None
            else:
                code.append(line)
    if fence is not None:
        blocks.append(Block("code", "\n".join(code), fence[2], closed=False))
    flush_prose()
    return blocks


def _starts_new_chunk(prose: list[str], line: str) -> bool:
    """A blank line then a line that cannot continue a list: safe to render apart."""
    if not line.strip() or prose[-1].strip():
        return False
    return not _LIST_OR_INDENT.match(line)


SAFE_SCHEMES = ("http", "https", "mailto")


def open_link(url) -> bool:
    if url.scheme().lower() not in SAFE_SCHEMES:
        return False
    from PySide6.QtGui import QDesktopServices

    return QDesktopServices.openUrl(url)


def mono_font():
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.TypeWriter)
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
    """Blockquotes: indented on a tinted band in a dimmed colour; lists: room between items."""
    palette = QGuiApplication.palette()
    block = doc.begin()
    cursor = QTextCursor(doc)
    while block.isValid():
        fmt = block.blockFormat()
        level = int(fmt.property(QTextFormat.Property.BlockQuoteLevel) or 0)
        changed = False
        if level:
            fmt.setLeftMargin(14 * level)
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
        self.document().setDocumentMargin(2)
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

    def set_markdown(self, text: str):
        if text == self._source:
            return
        self._source = text
        self.document().setMarkdown(text, MD_FEATURES)
        _monospace_code_spans(self.document())
        _style_quotes_and_lists(self.document())
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
        return int(doc.size().height()) + 2

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
        self.copy_button = QToolButton(text="Copy")
        self.copy_button.setObjectName("copyCode")
        self.copy_button.setToolTip("Copy this code block")
        self.copy_button.clicked.connect(self.copy)
        head.addWidget(self.lang_label)
        head.addStretch(1)
        head.addWidget(self.copy_button)
        layout.addLayout(head)
        self.editor = QPlainTextEdit()
        self.editor.setObjectName("codeText")
        self.editor.setReadOnly(True)
        self.editor.setFont(mono_font())
        self.editor.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.editor.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.editor.setFrameShape(QFrame.Shape.NoFrame)
        self.editor.wheelEvent = lambda event: event.ignore()
        layout.addWidget(self.editor)
        self._text = ""
        self._fit()

    def text(self) -> str:
        return self._text

    def set_code(self, text: str, lang: str = ""):
        if lang:
            self.lang_label.setText(lang)
        if text == self._text:
            return
        if text.startswith(self._text) and self._text:
            cursor = self.editor.textCursor()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(text[len(self._text):])
        else:
            self.editor.setPlainText(text)
        self._text = text
        self._fit()

    def copy(self):
        QGuiApplication.clipboard().setText(self._text)
        from app.copy_feedback import flash_copied

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
        self._layout.setSpacing(6)
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
            widget.set_code(block.text, block.lang)
        elif block.kind == "think":
            widget.set_think(block.text, block.closed)
        else:
            widget.set_markdown(block.text)
