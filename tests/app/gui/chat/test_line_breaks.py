"""A reply's single newlines stay line breaks in the window, as in the exports."""

import pytest

pytestmark = pytest.mark.qt


@pytest.fixture
def shown(qtbot):
    """The documents a message's text is shown in (each view kept for the test: they own them)."""
    from app.gui.chat.markdown_view import MarkdownView

    views = []

    def show(text):
        views.append(MarkdownView())
        qtbot.addWidget(views[-1])
        views[-1].set_text(text)
        return [w.document() for w in views[-1].widgets()]

    return show


def test_a_poem_keeps_its_lines_in_one_paragraph(shown):
    (doc,) = shown("Roses are red,\nviolets are blue.")
    assert doc.toPlainText() == "Roses are red,\nviolets are blue."
    assert doc.blockCount() == 1  # a line break, not a paragraph's spacing between the lines


def test_a_list_item_and_a_quote_keep_their_lines(shown):
    (items,) = shown("- first line\n  second line\n- next item")
    assert items.toPlainText() == "first line\nsecond line\nnext item"
    (quote,) = shown("> said once\n> said twice")
    assert quote.toPlainText() == "said once\nsaid twice"


def test_bold_across_lines_stays_bold(shown):
    (doc,) = shown("**bold\nstill bold**")
    assert doc.toPlainText() == "bold\nstill bold"
    assert "font-weight:700" in doc.toHtml() and doc.blockCount() == 1


def test_a_table_and_a_heading_are_untouched(shown):
    (doc,) = shown("| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |")
    table = doc.rootFrame().childFrames()[0]
    assert (table.rows(), table.columns()) == (3, 2)
    (doc,) = shown("# Title\nText under it")
    assert doc.firstBlock().text() == "Title" and doc.firstBlock().next().text() == "Text under it"


def test_a_reply_s_own_mark_characters_do_not_break_lines(shown):
    from app.gui.chat.line_breaks import MARK

    (doc,) = shown(f"one{MARK} two")
    assert doc.toPlainText() == "one two"


def test_lines_after_an_emoji_break_where_they_were_written(shown):
    (doc,) = shown("🍵 tea first,\nthen 🍪 a biscuit,\nthen sleep.")
    assert doc.toPlainText() == "🍵 tea first,\nthen 🍪 a biscuit,\nthen sleep."


@pytest.mark.timing
def test_a_poem_of_thousands_of_lines_renders_about_as_fast_as_qt_alone(shown):
    import time

    from PySide6.QtGui import QTextDocument

    from app.gui.chat.markdown_view import MD_FEATURES

    poem = "\n".join(f"line {i} of a **long** poem" for i in range(3000))
    started = time.perf_counter()
    QTextDocument().setMarkdown(poem, MD_FEATURES)
    alone = time.perf_counter() - started
    started = time.perf_counter()
    (doc,) = shown(poem)
    ours = time.perf_counter() - started
    assert doc.toPlainText().count("\n") == 2999
    assert ours < 50 * alone + 1.0, (ours, alone)  # one batched edit; edits one by one took minutes
