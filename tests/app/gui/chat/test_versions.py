"""Reply versions in the window: ‹ n/m › after Regenerate and Edit, the conversation goes on
from the version shown, Fork from the message menu, and all of it after a restart."""

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from tests.app_helpers import FakeEngine, dispose, run, send

pytestmark = pytest.mark.qt


def shown(w):
    return [x.text() for x in w.chat_view.message_widgets()]


def stored(store, w):
    return [m.content for m in store.get_conversation(w.chat.conv_id).messages]


def numbered(engine):
    n = {"i": 0}

    def reply(_messages):
        n["i"] += 1
        return f"reply {n['i']}"

    engine.reply = reply
    return n


def idle(w):
    return w.chat.gen is None and not w.bridge.is_generating()


def test_regenerate_keeps_versions_and_the_chat_continues_from_the_one_shown(qtbot, window, store, engine):
    numbered(engine)
    send(qtbot, window, "question")
    window.chat_view.message_widgets()[-1].regen_button.click()
    qtbot.waitUntil(lambda: idle(window) and shown(window)[-1] == "reply 2", timeout=5000)
    reply = window.chat_view.message_widgets()[-1]
    switcher = reply.version_switcher
    assert switcher.isVisible() and switcher.label.text() == "2/2"
    assert switcher.prev_button.isEnabled() and not switcher.next_button.isEnabled()
    assert not window.chat_view.message_widgets()[0].version_switcher.isVisible()

    switcher.prev_button.click()
    assert shown(window) == ["question", "reply 1"] and stored(store, window) == ["question", "reply 1"]
    switcher = window.chat_view.message_widgets()[-1].version_switcher
    assert switcher.label.text() == "1/2" and switcher.next_button.isEnabled()

    send(qtbot, window, "follow-up")
    assert [m["content"] for m in engine.calls[-1][1]] == ["question", "reply 1", "follow-up"]
    assert shown(window) == ["question", "reply 1", "follow-up", "reply 3"]

    # To version 2 and back: the follow-up branch under version 1 comes back with it.
    window.chat_view.message_widgets()[1].version_switcher.next_button.click()
    assert shown(window) == ["question", "reply 2"]
    window.chat_view.message_widgets()[1].version_switcher.prev_button.click()
    assert shown(window) == ["question", "reply 1", "follow-up", "reply 3"]


def test_edit_keeps_the_old_message_as_a_version(qtbot, window, store, engine):
    numbered(engine)
    send(qtbot, window, "first try")
    send(qtbot, window, "more")
    window.chat_view.message_widgets()[0].edit_button.click()
    window.composer.set_text("second try")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: idle(window) and len(shown(window)) == 2 and shown(window)[1] == "reply 3", timeout=5000)
    assert shown(window) == ["second try", "reply 3"]
    assert [m["content"] for m in engine.calls[-1][1]] == ["second try"]
    first = window.chat_view.message_widgets()[0]
    assert first.version_switcher.label.text() == "2/2"
    first.version_switcher.prev_button.click()
    assert shown(window) == ["first try", "reply 1", "more", "reply 2"]


def test_switching_is_off_while_a_reply_is_written(qtbot, window, engine):
    numbered(engine)
    send(qtbot, window, "q")
    window.chat_view.message_widgets()[-1].regen_button.click()
    qtbot.waitUntil(lambda: idle(window), timeout=5000)
    engine.token_delay = 0.05
    engine.reply = "a long reply " * 40
    send(qtbot, window, "again", wait=False)
    qtbot.waitUntil(lambda: window.chat.gen is not None and bool(window.chat.gen.text), timeout=5000)
    switcher = window.chat_view.message_widgets()[1].version_switcher
    assert not switcher.prev_button.isEnabled() and not window.chat.switch_version(
        window.chat_view.message_widgets()[1].message_id, -1
    )
    window.chat.stop()
    qtbot.waitUntil(lambda: idle(window), timeout=5000)
    assert switcher.prev_button.isEnabled()


def test_fork_from_the_message_menu(qtbot, window, store, engine):
    numbered(engine)
    send(qtbot, window, "one")
    send(qtbot, window, "two")
    original = window.chat.conv_id
    target = window.chat_view.message_widgets()[1]  # "reply 1"
    menu = target.context_menu()
    fork = next(a for a in menu.actions() if a.text() == "Fork from Here")
    fork.trigger()
    assert window.chat.conv_id != original
    assert shown(window) == ["one", "reply 1"] and stored(store, window) == ["one", "reply 1"]
    assert window.chat.conv_id in [r.id for r in store.list_conversations()]
    assert store.get_conversation(original).messages[-1].content == "reply 2"
    # The menu over the message text offers it too (after Qt's own Copy).
    menu = window.chat_view.message_widgets()[0].body.context_menu(QPoint(5, 5))
    assert "Fork from Here" in [a.text() for a in menu.actions()]
    menu.deleteLater()


def test_versions_survive_a_restart(qtbot, qloop, store, window, engine):
    from app.gui.window import MainWindow

    numbered(engine)
    send(qtbot, window, "question")
    window.chat_view.message_widgets()[-1].regen_button.click()
    qtbot.waitUntil(lambda: idle(window) and shown(window)[-1] == "reply 2", timeout=5000)
    window.chat_view.message_widgets()[-1].version_switcher.prev_button.click()
    conv_id = window.chat.conv_id

    again = MainWindow(store, FakeEngine())
    again.show()
    run(qtbot, again.start_engine("fake-small"))
    again.chat.open_conversation(conv_id)
    assert shown(again) == ["question", "reply 1"]
    assert again.chat_view.message_widgets()[-1].version_switcher.label.text() == "1/2"
    dispose(qtbot, again)


def test_switching_versions_reprefills_only_after_the_common_prefix(qtbot, qloop, tiny_model_path):
    """The real engine and the tiny model: after Regenerate and a switch back to version 1,
    the next turn reuses the cached tokens up to where the versions differ."""
    from app.core.settings import DEFAULTS_KEY
    from tests.app.gui.test_window_engine import close_window, open_window

    store, window = open_window(qtbot, tiny_model_path)
    store.set_state(DEFAULTS_KEY, {"max_tokens": 6, "temperature": 0.0})
    send(qtbot, window, "Hello there, tell me something.")
    conv_id = window.chat.conv_id
    first = store.get_conversation(conv_id).messages[-1]
    turn1_prompt = first.stats["prompt_tokens"]
    window.dialogs.save_chat_settings(conv_id, {"max_tokens": 6, "temperature": 2.0})
    for _ in range(5):  # sampled hot, a version that differs from the first
        window.chat.regenerate()
        qtbot.waitUntil(lambda: idle(window), timeout=60_000)
        if store.get_conversation(conv_id).messages[-1].content != first.content:
            break
    second = store.get_conversation(conv_id).messages[-1]
    assert second.content != first.content and second.versions >= 2

    while window.chat_view.message_widgets()[-1].message_id != first.id:
        window.chat_view.message_widgets()[-1].version_switcher.prev_button.click()
    window.dialogs.save_chat_settings(conv_id, {"max_tokens": 2, "temperature": 0.0})
    send(qtbot, window, "And then?")
    msgs = store.get_conversation(conv_id).messages
    assert [m.id for m in msgs[:2]] == [msgs[0].id, first.id]
    stats = msgs[-1].stats
    # The cache held the prompt + version 2: all of the first turn's prompt is reused, and
    # only version 1's tokens and the new question are computed.
    assert stats["reused_tokens"] >= turn1_prompt
    assert stats["prefilled_tokens"] == stats["prompt_tokens"] - stats["reused_tokens"]
    assert stats["prefilled_tokens"] < stats["prompt_tokens"] - turn1_prompt + 8
    close_window(qtbot, store, window)


def test_clicking_regenerate_leaves_the_keyboard_in_the_composer(qtbot, window, engine):
    numbered(engine)
    send(qtbot, window, "question")
    assert window.focusWidget() is window.composer.editor
    QTest.mouseClick(window.chat_view.message_widgets()[-1].regen_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: idle(window) and shown(window)[-1] == "reply 2", timeout=5000)
    assert window.focusWidget() is window.composer.editor
    QTest.keyClicks(window.focusWidget(), "next")
    assert window.composer.text() == "next"
