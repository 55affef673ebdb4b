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


def _paints(brush) -> bool:
    return brush.style().name != "NoBrush" and brush.color().alpha() > 0


def test_code_lines_share_one_background(qapp):
    """Qt paints a <pre>'s background line by line, each over the underscores of the line above."""
    from PySide6.QtGui import QTextCursor

    from app.transcripts.export_pdf import print_document

    long_first = "\n".join([CODE] * 3)  # its first lines go with the heading, in the heading's table
    doc = print_document(
        to_html(
            _conv("a function?", f"Here:\n\n```python\n{CODE}\n```", "A long one?", f"```\n{long_first}\n```"),
            for_print=True,
        )
    )
    block, seen = doc.begin(), 0
    while block.isValid():
        if "is_prime_" in block.text():
            seen += 1
            assert not _paints(block.blockFormat().background()), block.text()
            for fragment in block.textFormats():
                assert not _paints(fragment.format.background()), block.text()
            cursor = QTextCursor(block)
            table = cursor.currentTable()
            assert table is not None and _paints(table.cellAt(cursor).format().background())
        block = block.next()
    assert seen == 6 * 4


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


def test_a_long_first_code_block_keeps_one_heading_and_one_box(qapp, tmp_path):
    """Qt repeats a table's header row on every page it spans: the heading's table holds only the
    first lines of a long code block, so "Assistant" is printed once and every line once."""
    code = "\n".join(f"value_{i} = compute_{i}(x)" for i in range(150))
    pages = _pages(_conv("short", f"```python\n{code}\n```\n\nDone."), tmp_path)
    assert len(pages) >= 3
    text = "".join(page.get_textpage().get_text_range() for page in pages)
    assert text.count("Assistant") == 1
    assert all(text.count(f"value_{i} = compute_{i}(x)") == 1 for i in range(150))


def test_a_users_pasted_code_keeps_its_indentation(qapp, tmp_path):
    """A user's message prints as the window shows it, the text as typed: code pasted without a fence
    keeps its indentation (markdown made one paragraph of it), and markdown marks stay as typed."""
    pasted = "def f(n_value):\n    if n_value:\n        return 1\n\n**not bold**"
    pages = _pages(_conv(pasted, "Looks fine."), tmp_path)
    page = pages[0].get_textpage()
    text = page.get_text_range()
    assert "**not bold**" in text

    def left(word: str) -> float:
        start = text.index(word)
        return page.get_charbox(start)[0]

    assert left("def f") < left("if n_value") < left("return 1")


def test_a_quote_and_thinking_are_indented_by_their_css_pixels(qapp, tmp_path):
    """A quote is indented by 16 CSS px (1/96 inch each) and thinking by 12, not by a fraction of a
    millimetre (Qt prints block margins in the writer's 1,200 dpi device pixels)."""
    reply = "<think>Thinking it over.</think>A paragraph.\n\n> A quoted line."
    page = _pages(_conv("Quote something", reply), tmp_path)[0].get_textpage()
    text = page.get_text_range()

    def left(words: str) -> float:
        return page.get_charbox(text.index(words))[0]

    assert left("A quoted line") - left("A paragraph") == pytest.approx(16 / 96 * 72, abs=1.5)  # points
    assert left("Thinking it over") - left("A paragraph") == pytest.approx(12 / 96 * 72, abs=1.5)
