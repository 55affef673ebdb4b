"""The pdf export as printed: code blocks, long lines and page breaks, read back with pdfium."""

import pytest

from app.core.store import Conversation, Message
from app.transcripts.export import export_conversation, to_html

pdfium = pytest.importorskip("pypdfium2")
pytestmark = pytest.mark.qt

CODE = "\n".join(f"def is_prime_{i}(n_value):  # snake_case here" for i in range(6))
LONG_LINE = "x = call(" + ", ".join(f"argument_{i}" for i in range(40)) + ")"
MARGIN_PT = 16 / 25.4 * 72  # export_pdf's page margin


def _conv(*texts: str) -> Conversation:
    roles = ("user", "assistant")
    return Conversation("c", "Print", 0, 0, messages=[Message(i, "c", i, roles[i % 2], t) for i, t in enumerate(texts)])


def _pages(conv, tmp_path) -> list:
    path = export_conversation(conv, "pdf", tmp_path / "c.pdf")
    return list(pdfium.PdfDocument(str(path)))


def test_code_lines_share_one_background(qapp):
    """Qt paints a <pre>'s background line by line, each over the underscores of the line above."""
    from PySide6.QtGui import QTextCursor, QTextDocument

    doc = QTextDocument()
    doc.setHtml(to_html(_conv("a function?", f"Here:\n\n```python\n{CODE}\n```"), for_print=True))
    block, seen = doc.begin(), 0
    while block.isValid():
        if "is_prime_" in block.text():
            seen += 1
            assert block.blockFormat().background().style().name == "NoBrush", block.text()
            for fragment in block.textFormats():
                assert fragment.format.background().style().name == "NoBrush", block.text()
            table = QTextCursor(block).currentTable()
            assert table is not None and table.format().background().style().name != "NoBrush"
        block = block.next()
    assert seen == 6


def test_code_is_intact_and_long_lines_wrap_inside_the_page(qapp, tmp_path):
    pages = _pages(_conv("code?", f"```python\n{CODE}\n```\n\n```\n{LONG_LINE}\n```"), tmp_path)
    text = "".join(page.get_textpage().get_text_range() for page in pages)
    assert all(f"def is_prime_{i}(n_value):" in text for i in range(6))
    assert "argument_39)" in text
    for page in pages:
        width = page.get_width()
        textpage = page.get_textpage()
        chars = range(textpage.count_chars())
        rights = [textpage.get_charbox(i)[2] for i in chars if textpage.get_text_range(i, 1).strip()]
        assert max(rights) <= width - MARGIN_PT + 1, "text runs past the right margin"


def _pages_of(pages, marker: str) -> int:
    return next(i for i, page in enumerate(pages) if marker in page.get_textpage().get_text_range())


def test_a_role_heading_is_never_alone_at_the_foot_of_a_page(qapp, tmp_path):
    """A reply of k lines, then a question: around the k that pushes the question to page 2
    (found by bisection, whatever the fonts), the "User" heading always moves with it."""

    def layout(k: int) -> tuple[int, int]:
        filler = "\n".join(f"line {j}" for j in range(k))
        pages = _pages(
            Conversation(
                "c",
                "T",
                0,
                0,
                messages=[Message(1, "c", 0, "assistant", filler), Message(2, "c", 1, "user", "Zquestion here")],
            ),
            tmp_path,
        )
        texts = [page.get_textpage().get_text_range() for page in pages]
        heading = next(i for i, t in enumerate(texts) if "User" in t)
        return heading, _pages_of(pages, "Zquestion")

    lo, hi = 1, 200  # the question is on page 1 with lo lines, on page 2 with hi
    assert layout(hi)[1] > 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if layout(mid)[1] == 0 else (lo, mid)
    for k in range(hi - 3, hi + 3):
        heading, question = layout(k)
        assert heading == question, (
            f"with {k} lines the heading is on page {heading + 1}, its message on {question + 1}"
        )
