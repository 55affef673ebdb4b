"""Keys a newcomer expects: Ctrl+Tab / Ctrl+PgDn between chats, Up to edit the last message."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from tests.app_helpers import send

pytestmark = pytest.mark.qt
CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier


def test_ctrl_tab_and_ctrl_page_keys_move_between_chats(qtbot, window, store, engine):
    for text in ("first", "second", "third"):
        window.new_action.trigger()
        send(qtbot, window, text)
    ids = window.sidebar.ids()  # newest first: third, second, first
    assert window.chat.conv_id == ids[0]
    editor = window.composer.editor
    assert window.focusWidget() is editor
    QTest.keyClick(editor, Qt.Key.Key_Tab, CTRL)
    assert window.chat.conv_id == ids[1] and window.focusWidget() is editor
    QTest.keyClick(editor, Qt.Key.Key_PageDown, CTRL)
    assert window.chat.conv_id == ids[2]
    QTest.keyClick(editor, Qt.Key.Key_PageDown, CTRL)
    assert window.chat.conv_id == ids[0]  # round the end, back to the top
    QTest.keyClick(editor, Qt.Key.Key_Backtab, CTRL | SHIFT)
    assert window.chat.conv_id == ids[2]
    QTest.keyClick(window.sidebar.list, Qt.Key.Key_PageUp, CTRL)
    assert window.chat.conv_id == ids[1]
    assert window.chat_view.message_widgets()[0].text() == "second"


def test_up_in_an_empty_message_box_edits_the_last_message(qtbot, window, store, engine):
    send(qtbot, window, "first question")
    send(qtbot, window, "second question")
    editor = window.composer.editor
    QTest.keyClicks(editor, "draft")
    QTest.keyClick(editor, Qt.Key.Key_Up)  # with text, Up moves the cursor as always
    assert window.chat.editing is None and window.composer.text() == "draft"
    editor.clear()
    QTest.keyClick(editor, Qt.Key.Key_Up)
    last = store.get_conversation(window.chat.conv_id).messages[2]
    assert window.chat.editing == last.id and window.composer.text() == "second question"
    label = window.composer.edit_label
    assert window.composer.edit_bar.isVisible() and "replaces" not in label.text()
    assert "new version" in label.text() and "stays" in label.text()  # the earlier one is kept
    QTest.keyClick(editor, Qt.Key.Key_Escape)
    assert window.chat.editing is None and not window.composer.edit_bar.isVisible()
