"""Notice bars give the keyboard back: a clicked action (Load It, Switch to…, Undo) leaves the
focus in the message box, not on whatever widget Qt picks when the bar hides."""

import pytest

from tests.app_helpers import send

pytestmark = pytest.mark.qt


def test_a_notice_action_gives_the_focus_back_to_the_message_box(qtbot, window, engine):
    send(qtbot, window, "hello")  # a message with buttons that could take the focus
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=3000)
    clicked = []
    bar = window.notices.show_notice("model-task", "Added Fake Big.", "info", ("Load It", lambda: clicked.append(1)))
    qtbot.waitUntil(bar.isVisible, timeout=3000)
    bar.action_button.setFocus()  # a mouse click gives a push button the focus
    qtbot.waitUntil(bar.action_button.hasFocus, timeout=3000)
    bar.action_button.click()
    assert clicked and window.notices.bar("model-task") is None
    assert window.focusWidget() is window.composer.editor


def test_a_notice_closed_elsewhere_leaves_the_focus_alone(qtbot, window):
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=3000)
    window.sidebar.search.setFocus()
    qtbot.waitUntil(window.sidebar.search.hasFocus, timeout=3000)
    window.notices.show_notice("tools", "Tools are off.")
    window.notices.dismiss("tools")
    assert window.focusWidget() is window.sidebar.search
