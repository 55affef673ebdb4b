"""PDF export: Qt's rich text lays out the print-flavoured HTML page on A4.

The only part of exporting that needs Qt; app.transcripts.export imports this module lazily, only for
a pdf, so the CLI and the other formats never load PySide6.
"""

import os
import sys
from typing import Any

from engine.errors import ChinwagError

_qt_app = None  # a QGuiApplication we had to create for pdf; kept alive for the process


def _qt() -> Any:  # the QtGui module
    """PySide6's QtGui, with an application to lay text out (offscreen when there is no display)."""
    global _qt_app
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from PySide6 import QtGui
    except ImportError as e:
        raise ChinwagError(f"pdf export needs PySide6, which could not be loaded: {e}") from e
    if QtGui.QGuiApplication.instance() is None:
        _qt_app = QtGui.QGuiApplication([sys.argv[0] if sys.argv else "chinwag"])
    return QtGui


def html_to_pdf(page_html: str, title: str) -> bytes:
    """The pdf bytes of page_html (Qt rich text: see app.transcripts.export.to_html(for_print=True))."""
    QtGui = _qt()
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF

    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QtGui.QPdfWriter(buffer)
    writer.setTitle(title)
    writer.setCreator("Chinwag")
    writer.setPageSize(QtGui.QPageSize(QtGui.QPageSize.PageSizeId.A4))
    writer.setPageMargins(QMarginsF(16, 16, 16, 16), QtGui.QPageLayout.Unit.Millimeter)
    print_document(page_html).print_(writer)
    del writer  # finishes the pdf
    buffer.close()
    return bytes(data.data())


def print_document(page_html: str) -> Any:  # a QTextDocument
    """The QTextDocument that html_to_pdf prints."""
    QtGui = _qt()
    doc = QtGui.QTextDocument()
    option = doc.defaultTextOption()
    option.setWrapMode(QtGui.QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)  # a long word or line stays on the page
    doc.setDefaultTextOption(option)
    doc.setHtml(page_html)
    _unpaint_lines_in_cells(doc, QtGui)
    return doc


def _unpaint_lines_in_cells(doc: Any, QtGui: Any) -> None:
    """Qt's HTML import gives every line in a coloured table cell the cell's background, and each
    line painted over the one above would hide its underscores: the cell paints it once."""
    background = QtGui.QTextFormat.Property.BackgroundBrush
    block = doc.begin()
    while block.isValid():
        cursor = QtGui.QTextCursor(block)
        if block.blockFormat().hasProperty(background) and cursor.currentTable() is not None:
            fmt = block.blockFormat()
            fmt.clearBackground()
            cursor.setBlockFormat(fmt)
            for fragment in block.textFormats():
                char = fragment.format
                if char.hasProperty(background):
                    char.clearBackground()
                    cursor.setPosition(block.position() + fragment.start)
                    end = block.position() + fragment.start + fragment.length
                    cursor.setPosition(end, QtGui.QTextCursor.MoveMode.KeepAnchor)
                    cursor.setCharFormat(char)
        block = block.next()
