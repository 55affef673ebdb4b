"""Tooltips of text from elsewhere show it as written, never drawn as HTML (issue 35, tried as an
attacker: an MCP server's description, a chat title or a file name such as `<img src=...>`)."""

import pytest
from PySide6.QtGui import QTextDocument

from app.gui import tooltips
from tests.app_helpers import send

pytestmark = pytest.mark.qt


def shown(tip: str) -> str:
    """What a tooltip's reader sees: Qt draws a tip that looks like HTML as rich text."""
    from PySide6.QtGui import Qt

    if not Qt.mightBeRichText(tip):
        return tip
    doc = QTextDocument()
    doc.setHtml(tip)
    return doc.toPlainText()


@pytest.mark.parametrize(
    "text", ["<b>Allowed</b> by policy", '<img src="/etc/x.png">', "a < b & c > d", "plain words", "two\nlines  spaced"]
)
def test_a_text_that_looks_like_html_is_shown_as_written(qapp, text):
    assert shown(tooltips.plain(text)) == text


def test_a_chat_whose_title_looks_like_html_is_listed_with_it_as_written(qtbot, window, store, engine):
    send(qtbot, window, "<h1>Approved</h1><img src=x>")
    qtbot.waitUntil(lambda: window.sidebar.list.count() == 1, timeout=2000)
    assert shown(window.sidebar.list.item(0).toolTip()).startswith("<h1>Approved</h1>")
