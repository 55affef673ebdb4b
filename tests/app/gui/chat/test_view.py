"""The transcript at any window size: the reading column reflows to the space it has (nothing
clipped at the right edge, every action in reach), and a version switch keeps its place."""

import pytest
from PySide6.QtCore import QPoint, Qt

from tests.app_helpers import run

pytestmark = pytest.mark.qt

LONG_STATS = {
    "generated_tokens": 512,
    "decode_tps": 9.7,
    "ttft_s": 0.65,
    "reused_tokens": 12_345,
    "dropped_messages": 3,
    "finish_reason": "length",
}


def open_window(qtbot, store, engine):
    from app.gui.window import MainWindow

    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    run(qtbot, w.start_engine("fake-small"))
    return w


def in_viewport(view, widget) -> bool:
    """The widget is drawn whole inside the chat view's visible width."""
    left = widget.mapTo(view.viewport(), QPoint(0, 0)).x()
    return widget.isVisible() and 0 <= left and left + widget.width() <= view.viewport().width()


def fits(view, width):
    assert view.widget().width() <= view.viewport().width()
    for message in view.message_widgets():
        assert in_viewport(view, message), (width, message.role)
        for button in (message.copy_button, message.edit_button, message.regen_button, message.more_button):
            if not button.isHidden():
                assert in_viewport(view, button), (width, button.objectName())
        stats = message.stats_label
        if not stats.isHidden():  # the whole stats line, wrapped if it must be
            assert in_viewport(view, stats) and stats.height() >= stats.heightForWidth(stats.width())


def test_the_column_reflows_at_every_width_from_the_minimum(qtbot, qloop, store, engine):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY
    from app.gui.window import MIN_SIZE

    conv = store.create_conversation("A chat with long lines")
    store.add_message(conv.id, "user", "Look at " + "this word " * 40 + "https://example.com/" + "a" * 150)
    reply = "Some prose.\n\n```python\ndef is_prime(n):\n    return n > 1\n```\n\n" + "More prose. " * 30
    store.add_message(conv.id, "assistant", reply, model_id="a-model-with-a-very-long-name-" * 3, stats=LONG_STATS)
    store.add_message(conv.id, "user", "a pasted page " * 200)  # folded: Show more (1,800 more characters)
    store.set_state("last_conversation", conv.id)
    w = open_window(qtbot, store, engine)
    view = w.chat_view
    assert w.sidebar.isVisible()
    sizes = ((0, MIN_SIZE[0]), (0, 800), (0, 900), (0, 1100), (14, MIN_SIZE[0]), (14, 900), (20, MIN_SIZE[0]))
    try:
        for font_size, width in sizes:  # at 20 pt Show more's text was wider than the column (seen on X)
            store.set_state(APP_KEY, {"theme": "system", "font_size": font_size, "default_model": ""})
            w.apply_app_settings()
            w.resize(width, MIN_SIZE[1])
            qtbot.waitUntil(lambda width=width: w.width() == width)
            qtbot.waitUntil(lambda width=width: fits(view, width))  # once the layout has settled
        assert "prompt tokens reused" in view.message_widgets()[1].stats_label.text()
        assert view.message_widgets()[-1].more_button.text().endswith("more characters)")  # drawn elided
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
    w.close()
    run(qtbot, w.shutdown())


def test_the_welcome_fits_the_minimum_window(qtbot, qloop, store, engine):
    from app.gui import theme
    from app.gui.chat.welcome import EXAMPLE_PROMPTS
    from app.gui.settings.preferences import APP_KEY
    from app.gui.window import MIN_SIZE

    w = open_window(qtbot, store, engine)
    view = w.chat_view
    w.resize(*MIN_SIZE)
    qtbot.waitUntil(lambda: w.width() == MIN_SIZE[0])
    welcome = view.welcome

    def fits():
        assert view.widget().width() <= view.viewport().width() and in_viewport(view, welcome)
        for button in welcome.prompt_buttons:
            assert in_viewport(view, button) and button.width() >= button.sizeHint().width()
        keys = welcome.keys
        assert in_viewport(view, keys) and len(keys.lines()) > 1  # too narrow for one line: whole items wrap
        for line in keys.lines():
            assert not line.strip().startswith("·") and not line.strip().endswith("·")
            assert keys.fontMetrics().horizontalAdvance(line) <= keys.width()

    qtbot.waitUntil(fits)  # once the layout has settled
    try:  # at a big font size a prompt wraps inside its button rather than being cut
        store.set_state(APP_KEY, {"theme": "system", "font_size": 16, "default_model": ""})
        w.apply_app_settings()
        qtbot.waitUntil(fits)
        assert view.verticalScrollBar().value() == 0  # taller than the view: read from its heading
        assert any("\n" in button.text() for button in welcome.prompt_buttons)
        assert [b.text().replace("\n", " ") for b in welcome.prompt_buttons] == list(EXAMPLE_PROMPTS)
    finally:
        theme.apply("system", 0)
    w.close()
    run(qtbot, w.shutdown())


def test_a_version_switch_keeps_the_message_where_it_was(qtbot, qloop, store, engine):
    from PySide6.QtTest import QTest

    conv = store.create_conversation("Versions")
    for i in range(3):  # the chat scrolls before the switch as after it
        store.add_message(conv.id, "user", f"earlier question {i}")
        store.add_message(conv.id, "assistant", f"earlier answer {i}. " * 30)
    question = store.add_message(conv.id, "user", "first question")
    store.add_message(conv.id, "assistant", "first answer. " * 40)
    for i in range(8):  # a long branch below the first answer
        store.add_message(conv.id, "user", f"question {i}")
        store.add_message(conv.id, "assistant", f"answer {i}. " * 30)
    store.add_message(conv.id, "assistant", "a shorter second answer", parent_id=question.id)
    store.set_state("last_conversation", conv.id)
    w = open_window(qtbot, store, engine)
    view = w.chat_view
    w.resize(900, 600)
    reply = view.message_widgets()[7]
    assert reply.version_switcher.label.text() == "2/2"

    def top(widget):
        return widget.mapTo(view.viewport(), QPoint(0, 0)).y()

    bar = view.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.value() == bar.maximum())
    place = top(reply)
    arrows = [reply.version_switcher.prev_button.mapTo(w, QPoint(0, 0))]
    arrows.append(reply.version_switcher.next_button.mapTo(w, QPoint(0, 0)))
    QTest.mouseClick(reply.version_switcher.prev_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(view.message_widgets()) == 24)
    switched = view.message_widgets()[7]
    assert switched.text().startswith("first answer") and switched.version_switcher.label.text() == "1/2"
    qtbot.waitUntil(lambda: view._held is None, timeout=3000)  # the long branch has laid out below it
    assert top(switched) == place  # not scrolled to the bottom: the message stays where it was
    now = [switched.version_switcher.prev_button, switched.version_switcher.next_button]
    assert [b.mapTo(w, QPoint(0, 0)) for b in now] == arrows  # ‹ › stay under the mouse
    assert w.focusWidget() is w.composer.editor  # typing still goes to the message box
    # Read on into the long branch, then back to the short version: nothing below it now, and
    # still it stays where it was (its old place was the chat's end, so it needs room below).
    bar.setValue(bar.value() + 200)
    qtbot.waitUntil(lambda: top(switched) == place - 200)
    place = top(switched)
    QTest.mouseClick(switched.version_switcher.next_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(view.message_widgets()) == 8)
    back = view.message_widgets()[7]
    assert back.text() == "a shorter second answer"
    qtbot.waitUntil(lambda: view._held is None, timeout=3000)
    assert top(back) == place
    # Scrolling up takes away the room left below it: no blank page to scroll back down to.
    room = view._slack
    assert room > 0
    bar.triggerAction(bar.SliderAction.SliderPageStepSub)
    qtbot.waitUntil(lambda: view._slack < room and (view._slack == 0 or bar.value() == bar.maximum()))
    w.close()
    run(qtbot, w.shutdown())
