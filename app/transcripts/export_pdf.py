"""PDF export: Qt's rich text lays out the print-flavoured HTML page on A4.

The only part of exporting that needs Qt; app.transcripts.export imports this module lazily, only for
a pdf, so the CLI and the other formats never load PySide6.
"""

import os
import sys

from engine.errors import ChinwagError

_qt_app = None  # a QGuiApplication we had to create for pdf; kept alive for the process


def html_to_pdf(page_html: str, title: str) -> bytes:
    """The pdf bytes of page_html (Qt rich text: see app.transcripts.export.to_html(for_print=True))."""
    global _qt_app
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMarginsF
        from PySide6.QtGui import QGuiApplication, QPageLayout, QPageSize, QPdfWriter, QTextDocument, QTextOption
    except ImportError as e:
        raise ChinwagError(f"pdf export needs PySide6, which could not be loaded: {e}") from e

    if QGuiApplication.instance() is None:
        _qt_app = QGuiApplication([sys.argv[0] if sys.argv else "chinwag"])
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    writer = QPdfWriter(buffer)
    writer.setTitle(title)
    writer.setCreator("Chinwag")
    writer.setPageSize(QPageSize(QPageSize.PageSizeId.A4))
    writer.setPageMargins(QMarginsF(16, 16, 16, 16), QPageLayout.Unit.Millimeter)
    doc = QTextDocument()
    option = doc.defaultTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)  # a long word or code line stays on the page
    doc.setDefaultTextOption(option)
    doc.setHtml(page_html)
    doc.print_(writer)
    del writer  # finishes the pdf
    buffer.close()
    return bytes(data.data())
