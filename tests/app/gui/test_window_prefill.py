"""Issue 9 in the window: 'Reading your message… 43%' while a prompt is read, and the draft
read ahead when typing pauses or after a paste (Preferences can turn it off)."""

import asyncio

import pytest
from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from app.core.settings import DEFAULTS_KEY, PREFILL_KEY, load_defaults
from engine.types import PrefillProgress
from tests.app_helpers import dispose, send

pytestmark = pytest.mark.qt


def real_window(qtbot, model_path):
    """The real window on a real engine with `model_path` loaded; short greedy replies."""
    from app.core.store import Store
    from app.gui.window import MainWindow
    from engine.api import Engine

    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": 4, "temperature": 0.0})
    window = MainWindow(store, Engine())
    window.show()
    task = window.start_engine(str(model_path))
    qtbot.waitUntil(task.done, timeout=120_000)
    return store, window


def test_reading_progress_in_the_live_reply_and_the_status_bar(qtbot, window, store, engine):
    engine.progress = [PrefillProgress(0, 3000, 3100, 4096), PrefillProgress(1290, 3000, 3100, 4096)]
    engine.reading = asyncio.Event()
    send(qtbot, window, "A very long pasted message", wait=False)
    live = window.chat_view.message_widgets()[-1]
    qtbot.waitUntil(lambda: "Reading your message… 43%" in live.stats_label.text(), timeout=5000)
    assert "Writing…" not in live.stats_label.text()
    assert window.status.state_label.text() == "Reading your message… 43%"
    # The context figure is known as soon as the prompt is.
    assert window.status.context_label.text() == "Context 3,100 / 4,096"
    engine.reading.set()
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=10_000)
    assert "Reading" not in live.stats_label.text() and "tok/s" in live.stats_label.text()
    assert window.status.state_label.text() == "Ready"


def test_a_prompt_read_at_once_shows_its_size_but_no_reading_text(qtbot, window, store, engine):
    engine.progress = [PrefillProgress(1, 1, 1234, 4096)]  # a draft read ahead: one token left
    engine.reading = asyncio.Event()
    send(qtbot, window, "A message read while it was typed", wait=False)
    qtbot.waitUntil(lambda: window.status.context_label.text() == "Context 1,234 / 4,096", timeout=5000)
    live = window.chat_view.message_widgets()[-1]
    assert "Reading" not in live.stats_label.text() and "Reading" not in window.status.state_label.text()
    engine.reading.set()
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=10_000)


def test_typing_pause_and_paste_read_the_draft_ahead(qtbot, window, store, engine):
    engine.reply = "ok"
    send(qtbot, window, "first message")
    conv_id = window.chat.conv_id
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000) as paused:
        QTest.keyClicks(window.composer.editor, "a draft in prog")
    assert paused.args == ["a draft in prog"]
    qtbot.waitUntil(lambda: len(engine.prefills) == 1, timeout=5000)
    conv, sent, params = engine.prefills[0]
    assert conv == conv_id and params.max_tokens == engine.calls[-1][2].max_tokens
    assert sent == [
        {"role": "user", "content": "first message"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "a draft in prog"},
    ]
    # A paste is read at once, without waiting for a pause.
    mime = QMimeData()
    mime.setText("ress, then a pasted page")
    with qtbot.waitSignal(window.composer.draftPaused, timeout=100) as pasted:
        window.composer.editor.insertFromMimeData(mime)
    assert pasted.args == ["a draft in progress, then a pasted page"]
    qtbot.waitUntil(lambda: len(engine.prefills) == 2, timeout=5000)
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=10_000)
    assert engine.calls[-1][1] == engine.prefills[-1][1]  # the turn sent is the prompt read ahead
    assert not window.composer._pause.isActive()
    # Editing the first message: the draft replaces it and everything after it.
    window.chat_view.message_widgets()[0].edit_button.click()
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000):
        QTest.keyClicks(window.composer.editor, " (edited)")
    qtbot.waitUntil(lambda: len(engine.prefills) == 3, timeout=5000)
    assert engine.prefills[-1][1] == [{"role": "user", "content": "first message (edited)"}]


def test_no_draft_is_read_while_a_reply_generates_or_when_turned_off(qtbot, window, store, engine):
    engine.reply = "a reply long enough to still be streaming while the user types"
    engine.token_delay = 0.05
    send(qtbot, window, "first", wait=False)
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000):
        QTest.keyClicks(window.composer.editor, "typed while it answers")
    assert window.chat.gen is not None and engine.prefills == []
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=10_000)
    # Preferences › "Read the message while I type" off.
    prefs = window.dialogs.preferences_dialog()
    assert prefs.prefill_box.isChecked()
    prefs.prefill_box.setChecked(False)
    prefs.accept()
    assert load_defaults(store)[PREFILL_KEY] is False
    window.composer.editor.clear()
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000):
        QTest.keyClicks(window.composer.editor, "now idle")
    assert engine.prefills == [] and window.bridge.pending() == 0


def test_a_draft_typed_in_the_real_window_makes_enter_compute_one_token(qtbot, qloop, tiny_model_path):
    store, window = real_window(qtbot, tiny_model_path)
    send(qtbot, window, "Hello there")
    draft = "Tell me a story about a cat and a long journey. " * 6
    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=60_000) as read:
        QGuiApplication.clipboard().setText(draft)
        window.composer.editor.paste()
    assert read.args[0] == window.chat.conv_id and read.args[1].finished
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=60_000)
    stats = store.get_conversation(window.chat.conv_id).messages[-1].stats
    assert stats["prefilled_tokens"] == 1 and stats["reused_tokens"] == stats["prompt_tokens"] - 1
    assert read.args[1].prompt_tokens == stats["prompt_tokens"] - 1
    dispose(qtbot, window, store)


def test_a_new_chats_draft_is_read_ahead_and_handed_to_the_chat_it_becomes(qtbot, window, store, engine):
    from app.gui.chat.controller import NEW_CHAT_DRAFT

    engine.reply = "ok"
    assert window.chat.conv_id is None
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000):
        QTest.keyClicks(window.composer.editor, "a first message")
    qtbot.waitUntil(lambda: len(engine.prefills) == 1, timeout=5000)
    assert engine.prefills[0][:2] == (NEW_CHAT_DRAFT, [{"role": "user", "content": "a first message"}])
    assert window.sidebar.ids() == []  # nothing is saved while typing
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=10_000)
    conv_id = window.chat.conv_id
    assert engine.adopted == [(NEW_CHAT_DRAFT, conv_id)] and engine.calls[-1][0] == conv_id
    # A draft in a new chat that is left for another chat is forgotten.
    window.new_action.trigger()
    with qtbot.waitSignal(window.composer.draftPaused, timeout=5000):
        QTest.keyClicks(window.composer.editor, "never sent")
    qtbot.waitUntil(lambda: len(engine.prefills) == 2, timeout=5000)
    window.chat.open_conversation(conv_id)
    qtbot.waitUntil(lambda: NEW_CHAT_DRAFT in engine.forgotten, timeout=5000)
    assert engine.adopted == [(NEW_CHAT_DRAFT, conv_id)]


def test_a_long_first_message_pasted_in_a_new_chat_costs_one_token_on_enter(qtbot, qloop, tiny_model_path):
    store, window = real_window(qtbot, tiny_model_path)
    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=60_000) as read:
        QGuiApplication.clipboard().setText("Tell me a story about a cat and a long journey. " * 6)
        window.composer.editor.paste()
    assert read.args[1].finished and window.chat.conv_id is None
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=60_000)
    stats = store.get_conversation(window.chat.conv_id).messages[-1].stats
    assert stats["prefilled_tokens"] == 1 and stats["reused_tokens"] == stats["prompt_tokens"] - 1
    dispose(qtbot, window, store)
