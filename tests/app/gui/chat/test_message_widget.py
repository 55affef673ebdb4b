"""One message's widget: how much of a long user message shows folded, and its stats line."""

import pytest

pytestmark = pytest.mark.qt


def test_a_pasted_page_is_folded_by_characters_and_by_lines(qtbot):
    from app.core.store import MessageRole
    from app.gui.chat.message_widget import USER_DISPLAY_LIMIT, USER_DISPLAY_LINES, MessageWidget, folded

    words = " ".join(f"word{i}" for i in range(441))  # a 441-word paste, one paragraph
    head = folded(words)
    assert len(head) <= USER_DISPLAY_LIMIT and words.startswith(head) and words[len(head)] == " "  # cut at a word
    poem = "\n".join(f"line {i}" for i in range(40))
    assert folded(poem).count("\n") == USER_DISPLAY_LINES - 1
    assert folded("a short question\nover two lines") == "a short question\nover two lines"

    widget = MessageWidget(1, MessageRole.USER, words)
    qtbot.addWidget(widget)
    assert widget.more_button.isVisibleTo(widget) and "more characters" in widget.more_button.text()
    assert widget.body.toPlainText() == head + "…" and widget.text() == words  # Copy gets all of it
    widget.more_button.click()
    assert widget.body.toPlainText() == words and widget.more_button.text() == "Show less"


def test_the_context_menu_has_no_greyed_link_entry(qtbot):
    from PySide6.QtCore import QPoint

    from app.core.store import MessageRole
    from app.gui.chat.message_widget import MessageWidget

    widget = MessageWidget(1, MessageRole.ASSISTANT, "Plain words, and a [link](https://example.com).")
    qtbot.addWidget(widget)
    prose = widget.body.widgets()[0]
    names = [a.text().replace("&", "") for a in prose.context_menu(QPoint(1, 1)).actions() if not a.isSeparator()]
    assert "Copy Link Location" not in names
    assert "Copy Message" in names and "Fork from Here" in names
