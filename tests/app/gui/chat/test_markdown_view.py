"""The Markdown view: streaming re-renders only what changed; links, tables and headings render."""

import time

import pytest

pytestmark = pytest.mark.qt


@pytest.mark.timing
def test_streaming_rerenders_only_the_last_block(qtbot):
    from app.gui.chat.markdown_view import MarkdownView, ProseView

    view = MarkdownView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    reply = "".join(f"Paragraph {i} has some **bold** text and `code`.\n\n" for i in range(170))
    assert len(reply) > 8000
    text, costs = "", []
    for i in range(0, len(reply), 40):
        text = reply[: i + 40]
        before = view.renders
        start = time.perf_counter()
        view.set_text(text)
        costs.append(time.perf_counter() - start)
        assert view.renders - before <= 2  # the last block (and at most one new one)
    first = view.widgets()[0]
    assert isinstance(first, ProseView) and first.toPlainText().startswith("Paragraph 0 has some bold")
    assert len(view.widgets()) == 170
    # The update cost does not grow with the length of the reply.
    early, late = sorted(costs[:20])[10], sorted(costs[-20:])[10]
    assert late < max(early * 5, 0.01)


def test_block_kind_change_replaces_the_widget(qtbot):
    from app.gui.chat.markdown_view import CodeBlock, MarkdownView, ProseView

    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_text("Intro\n\n``")
    assert [type(w) for w in view.widgets()] == [ProseView, ProseView]
    view.set_text("Intro\n\n```py\nprint(1)")
    assert [type(w) for w in view.widgets()] == [ProseView, CodeBlock]
    view.set_text("Intro")
    assert [type(w) for w in view.widgets()] == [ProseView]


def test_links_tables_and_headings_render(qtbot):
    from app.gui.chat.markdown_view import MarkdownView

    view = MarkdownView()
    qtbot.addWidget(view)
    view.set_text("## Head\n\nSee [docs](https://example.com).\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    head, link, table = view.widgets()
    assert head.document().firstBlock().blockFormat().headingLevel() == 2
    assert "https://example.com" in link.document().toHtml() and not link.openLinks()
    assert table.document().rootFrame().childFrames()  # a QTextTable
    # Raw HTML from a model is shown as text, not interpreted.
    view.set_text("<b>not bold</b>")
    assert "<b>not bold</b>" in view.widgets()[0].toPlainText()


def test_only_web_links_are_opened(qtbot, monkeypatch):
    from PySide6.QtCore import QUrl
    from PySide6.QtGui import QDesktopServices

    from app.gui.chat.markdown_view import ProseView, open_link

    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toString()) or True)
    assert open_link(QUrl("https://example.com/a"))
    assert not open_link(QUrl("file:///etc/passwd")) and not open_link(QUrl("javascript:alert(1)"))
    assert not open_link(QUrl("notes.md"))
    assert opened == ["https://example.com/a"]
    view = ProseView()
    qtbot.addWidget(view)
    view.set_markdown("![secret](/etc/hostname) and [rel](other.md)")
    view.anchorClicked.emit(QUrl("other.md"))
    assert "rel" in view.toPlainText() and opened == ["https://example.com/a"]


def _line_tops(view) -> list:
    """Where each line of the message's prose starts, in the message's own coordinates."""
    tops = []
    for widget in view.widgets():
        doc = widget.document()
        block = doc.begin()
        while block.isValid():
            tops.append((block.text(), widget.y() + doc.documentLayout().blockBoundingRect(block).y()))
            block = block.next()
    return tops


@pytest.mark.parametrize(
    "text",
    [
        "The budget was 6200 francs.\n\nA total of 2000 francs was spent on the train ticket.",
        "Intro line.\n\n- one\n- two\n\n## Heading\n\nLast paragraph.",
    ],
)
def test_a_finished_message_spaces_its_paragraphs_as_while_it_streamed(qtbot, text):
    from app.gui.chat.markdown_view import MarkdownView

    """Seen on X: a reply's paragraphs drew 6 px closer once the chat was opened again (one document)."""
    from PySide6.QtWidgets import QVBoxLayout, QWidget

    tops = {}
    for merge in (False, True):
        host = QWidget()
        qtbot.addWidget(host)
        layout = QVBoxLayout(host)
        view = MarkdownView()
        layout.addWidget(view)
        layout.addStretch(1)
        view.set_text(text, merge=merge)
        host.resize(600, 500)
        host.show()
        qtbot.waitExposed(host)
        layout.activate()  # the widgets placed at their fitted heights
        tops[merge] = _line_tops(view)
    assert len(tops[True]) == len(tops[False]) and tops[True] == tops[False]


@pytest.mark.timing
@pytest.mark.parametrize(
    "line", ["- item {i} with `code`", "> quoted line {i} with `code`", "paragraph {i} with `code`\n"]
)
def test_thousands_of_list_items_quotes_or_paragraphs_render_in_one_layout(qtbot, line):
    from PySide6.QtGui import QTextDocument

    from app.gui.chat.markdown_view import MD_FEATURES, ProseView

    view = ProseView()
    qtbot.addWidget(view)
    text = "\n".join(line.format(i=i) for i in range(3000))
    started = time.perf_counter()
    QTextDocument().setMarkdown(text, MD_FEATURES)
    alone = time.perf_counter() - started
    started = time.perf_counter()
    view.set_markdown(text)
    took = time.perf_counter() - started
    assert f"{line.format(i=2999).strip().replace('`', '').lstrip('-> ')}" in view.toPlainText()
    assert took < 10 * alone + 1.0, (took, alone)  # one layout for the formatting; one per edit took 6-53 s


def test_a_quote_s_band_reaches_the_right_edge_of_the_text(qtbot):
    from app.gui.chat.markdown_view import ProseView

    view = ProseView()
    qtbot.addWidget(view)
    view.set_markdown("A paragraph.\n\n> A quote.\n>> A quote in a quote.")
    quotes = [b for b in (view.document().findBlockByNumber(i) for i in (1, 2))]
    assert [b.text() for b in quotes] == ["A quote.", "A quote in a quote."]
    assert [b.blockFormat().leftMargin() for b in quotes] == [14, 28]  # indented by level
    assert all(b.blockFormat().rightMargin() == 0 for b in quotes)  # as wide as the paragraph on the right
