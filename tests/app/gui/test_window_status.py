"""The status bar while a draft is read ahead: never "Context 0", then the context with the draft."""

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtTest import QTest

from tests.app_helpers import run, send

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


def test_after_a_model_switch_the_limit_is_the_loaded_models(qtbot, window, store, engine):
    label = window.status.context_label
    send(qtbot, window, "hello")  # Fake Small wrote the reply: 2,048 tokens of context
    assert label.text().endswith("/ 2,048")
    run(qtbot, window.bridge.load_model("fake-big"))
    qtbot.waitUntil(lambda: window.bridge.current_model.id == "fake-big", timeout=3000)
    qtbot.waitUntil(lambda: label.text().endswith("/ 8,192"), timeout=3000)  # seen on X: the old 2,048 stayed
    conv_id = window.chat.conv_id
    window.new_action.trigger()
    window.chat.open_conversation(conv_id)  # reopened: its last reply is still Fake Small's
    assert label.text() == "Context … / 8,192"  # Fake Small's count is in its tokens, not Fake Big's


def test_a_model_switch_never_shows_ready_beside_the_old_models_name(qtbot, window, engine):
    status = window.status
    send(qtbot, window, "hello")
    old = status.model_label.text()
    shown = []
    # Connected after the status bar: records what each progress report left on screen.
    window.bridge.loadProgress.connect(lambda _p: shown.append((status.model_label.text(), status.state_label.text())))
    run(qtbot, window.bridge.load_model("fake-big"))
    qtbot.waitUntil(lambda: status.state_label.text() == "Ready", timeout=3000)
    assert shown and all(name == old for name, _ in shown)  # the old model is loaded until the new one is
    assert not any(text.startswith("Ready") for _, text in shown), shown
    assert status.model_label.text() != old
    assert not status.progress.isTextVisible()  # one percentage, the state label's, not two that disagree


def test_at_the_minimum_size_and_20_pt_every_label_fits_the_bar(qtbot, window, store):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY
    from app.gui.window import MIN_SIZE

    status = window.status
    labels = (status.model_label, status.context_label, status.kv_label, status.state_label)

    def fits():
        for label in labels:
            if label.isVisible():
                left = label.mapTo(window, QPoint(0, 0)).x()
                assert left >= 0 and left + label.width() <= window.width(), (label.objectName(), label.text())
                # as wide as it needs to draw its text (a plain QLabel needs all of it, else it is cut)
                assert label.width() >= label.minimumSizeHint().width(), (label.objectName(), label.text())

    send(qtbot, window, "hello")  # a model, a context and KV memory to show
    window.resize(*MIN_SIZE)
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": 20, "default_model": ""})
        window.apply_app_settings()
        status.show_state("Re-reading the chat for the new instructions… 40%")
        qtbot.waitUntil(lambda: window.width() == MIN_SIZE[0] and status.state_label.isVisible())
        qtbot.waitUntil(fits)  # seen on X: "KV 33.8 M", and the state cut off the window's edge
        assert status.state_label.text() == "Re-reading the chat for the new instructions… 40%"  # drawn elided
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
