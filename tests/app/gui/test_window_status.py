"""The status bar while a draft is read ahead: never "Context 0", then the context with the draft."""

import pytest
from PySide6.QtTest import QTest

pytestmark = pytest.mark.qt


def test_the_context_is_not_zero_while_a_draft_is_read(qtbot, window, engine):
    label = window.status.context_label
    assert label.text() == "Context 0 / 2,048"  # an empty new chat
    seen = []
    window.bridge.draftReading.connect(lambda _conv: seen.append(label.text()))
    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=5000):
        QTest.keyClicks(window.composer.editor, "What is a prime number?")  # the pause reads it ahead
    assert seen and not any(text.startswith("Context 0") for text in seen)
    assert seen[-1] == "Context … / 2,048"
    read = engine.prefills[-1]
    assert label.text() == f"Context {len(read[1]):,} / 2,048"  # the fake engine counts one per message
    assert "typing" in label.toolTip()
