"""Issue 7's "done when": a newcomer launches Chinwag and types a question straight away,
without clicking, and it is sent and answered (the real engine, the tiny model loading)."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from tests.app_helpers import dispose

pytestmark = pytest.mark.qt


def test_typing_straight_away_is_sent_and_answered(qtbot, qloop, tiny_model_path):
    from app.core.settings import DEFAULTS_KEY
    from app.core.store import Store
    from app.gui.window import MainWindow
    from engine.api import Engine

    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": 5, "temperature": 0.0})
    window = MainWindow(store, Engine())  # dispose() deletes it
    window.show()
    task = window.start_engine(str(tiny_model_path))
    # No click: the keys go wherever the focus is, and that is the message box.
    target = window.focusWidget()
    assert target is window.composer.editor
    QTest.keyClicks(target, "Hello there")
    QTest.keyClick(target, Qt.Key.Key_Return)
    if window.bridge.current_model is None:  # still loading: queued, not ignored
        assert window.chat.queue and window.composer.text() == ""
    qtbot.waitUntil(task.done, timeout=120_000)
    qtbot.waitUntil(
        lambda: (
            len(window.chat_view.message_widgets()) == 2
            and window.chat.gen is None
            and not window.bridge.is_generating()
        ),
        timeout=120_000,
    )
    msgs = store.get_conversation(window.chat.conv_id).messages
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "complete")]
    assert msgs[0].content == "Hello there" and msgs[1].stats["generated_tokens"] >= 1
    assert window.focusWidget() is window.composer.editor
    dispose(qtbot, window, store)
