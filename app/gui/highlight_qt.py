"""Pygments spans (app.transcripts.highlight) applied to a Qt text document, and which palette is in use."""

import bisect
from collections.abc import Iterable

from PySide6.QtGui import (
    QColor,
    QFont,
    QGuiApplication,
    QPalette,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextDocument,
)

from app.transcripts.highlight import Span


def is_dark() -> bool:
    return QGuiApplication.palette().color(QPalette.ColorRole.Base).lightness() < 128


class SpanHighlighter(QSyntaxHighlighter):
    """Applies app.transcripts.highlight spans computed for the whole text to each line Qt asks about."""

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        self._starts: list[int] = []
        self._runs: list[tuple[int, int, QTextCharFormat]] = []  # UTF-16 offsets

    def set_spans(self, spans: Iterable[Span], text: str) -> None:
        units = _utf16_offsets(text)
        runs = []
        for span in spans:
            fmt = QTextCharFormat()
            if span.color:
                fmt.setForeground(QColor(span.color))
            if span.bold:
                fmt.setFontWeight(QFont.Weight.Bold)
            if span.italic:
                fmt.setFontItalic(True)
            start, end = span.start, span.start + span.length
            if units is not None:
                start, end = units[start], units[end]
            runs.append((start, end, fmt))
        self._runs = runs
        self._starts = [r[0] for r in runs]
        self.rehighlight()

    def highlightBlock(self, text: str) -> None:
        block = self.currentBlock()
        lo, hi = block.position(), block.position() + max(block.length() - 1, 0)
        i = max(bisect.bisect_right(self._starts, lo) - 1, 0)
        while i < len(self._runs) and self._runs[i][0] < hi:
            start, end, fmt = self._runs[i]
            if end > lo:
                self.setFormat(max(start, lo) - lo, min(end, hi) - max(start, lo), fmt)
            i += 1


def _utf16_offsets(text: str) -> list[int] | None:
    """Python index → Qt (UTF-16) position, or None when they are the same (no astral chars)."""
    if len(text.encode("utf-16-le")) == 2 * len(text):
        return None
    offsets, pos = [0], 0
    for ch in text:
        pos += 2 if ord(ch) > 0xFFFF else 1
        offsets.append(pos)
    return offsets
