"""The chat list's search: snippets from a word's start with the match marked, Esc clears it."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from tests.app_helpers import send

pytestmark = pytest.mark.qt


def test_a_snippet_starts_at_a_word_and_marks_the_match(qtbot, window, store, engine):
    from app.gui.sidebar import match_parts

    send(qtbot, window, "On the banks of the river Seine, in the middle of Paris, stands a cathedral.")
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "cathedral")
    qtbot.waitUntil(lambda: window.sidebar.snippets() != [""], timeout=2000)
    delegate = window.sidebar.list.itemDelegate()
    metrics = window.sidebar.list.fontMetrics()
    shown = delegate.shown_snippet(window.sidebar.snippets()[0], metrics, 200)
    before, match, after = match_parts(shown, "cathedral")
    assert match == "cathedral" and before.startswith("…") and before[1:2] != " "
    words = "On the banks of the river Seine, in the middle of Paris, stands a cathedral.".split()
    assert before[1:].split()[0] in words  # a whole word, not its tail
    assert match_parts("Seine and seine", "SEINE") == ("", "Seine", " and seine")


def test_a_snippet_too_long_for_its_row_ends_after_a_whole_word(qtbot, window, store, engine):
    text = "A cathedral stands on the banks of the river Seine, in the middle of Paris, by the bridges."
    send(qtbot, window, text)
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "cathedral")
    qtbot.waitUntil(lambda: window.sidebar.snippets() != [""], timeout=2000)
    delegate, metrics = window.sidebar.list.itemDelegate(), window.sidebar.list.fontMetrics()
    for chars in (16, 20, 30, 45):  # rows of several widths, whatever the font
        width = metrics.horizontalAdvance(text[:chars])
        shown = delegate.shown_snippet(window.sidebar.snippets()[0], metrics, width)
        assert shown.endswith("…") and metrics.horizontalAdvance(shown) <= width
        assert shown.startswith("A cathedral")
        assert shown[:-1] == " ".join(text.split()[: len(shown[:-1].split())]).rstrip(",")  # whole words


def test_esc_clears_the_search(qtbot, window, store, engine):
    send(qtbot, window, "first chat")
    window.new_action.trigger()
    send(qtbot, window, "second chat")
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "first")
    qtbot.waitUntil(lambda: len(window.sidebar.titles()) == 1, timeout=2000)
    QTest.keyClick(window.sidebar.search, Qt.Key.Key_Escape)
    assert window.sidebar.search.text() == ""
    qtbot.waitUntil(lambda: len(window.sidebar.titles()) == 2, timeout=2000)
    assert window.sidebar.snippets() == ["", ""]


def test_a_title_with_its_match_in_bold_fits_its_row_whole_to_the_ellipsis(qtbot, window, store, engine):
    from PySide6.QtGui import QFont, QFontMetrics

    from app.gui.sidebar import match_parts

    title = "Question number 1999 about rain and tea"
    send(qtbot, window, title)
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "number 1999")
    qtbot.waitUntil(lambda: window.sidebar.search_text == "number 1999", timeout=2000)
    delegate, font = window.sidebar.list.itemDelegate(), window.sidebar.list.font()
    metrics, bold = QFontMetrics(font), QFont(font)
    bold.setBold(True)
    for chars in (30, 34, 37):  # rows that cut the title after its match, whatever the font
        width = metrics.horizontalAdvance(title[:chars])
        shown = delegate.shown_title(window.sidebar.titles()[0], metrics, font, width)
        before, match, after = match_parts(shown, "number 1999")
        drawn = metrics.horizontalAdvance(before) + QFontMetrics(bold).horizontalAdvance(match)
        assert shown.endswith("…") and drawn + metrics.horizontalAdvance(after) <= width, (shown, width)
