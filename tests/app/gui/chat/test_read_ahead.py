"""Issue 15 §1 in the window: a changed chat is read ahead (new instructions, another model, another
version), a fork starts with its parent's cache and offers to write its missing reply, and the
labels say what is being read."""

import asyncio

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtTest import QTest

from app.gui.sidebar import elide_title
from engine.types import PrefillProgress
from tests.app_helpers import send

pytestmark = pytest.mark.qt


def idle(w):
    return w.chat.gen is None and not w.bridge.is_generating()


def fork_at(window, index):
    target = window.chat_view.message_widgets()[index]
    menu = target.context_menu()
    next(a for a in menu.actions() if a.text() == "Fork from Here").trigger()
    menu.deleteLater()


def test_a_fork_gets_its_parents_cache_and_enter_writes_its_missing_reply(qtbot, window, store, engine):
    engine.reply = "a reply"
    send(qtbot, window, "first question")
    send(qtbot, window, "second question")
    parent = window.chat.conv_id
    fork_at(window, 2)  # the user's second question: the fork ends without a reply
    fork = window.chat.conv_id
    assert fork != parent
    # The engine was asked to copy the parent's cache for exactly the fork's messages.
    qtbot.waitUntil(lambda: len(engine.forks) == 1, timeout=5000)
    assert engine.forks[0] == (
        parent,
        fork,
        [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "a reply"},
            {"role": "user", "content": "second question"},
        ],
    )
    # The fork says how to get its reply, and Enter in the empty composer writes it.
    button = window.composer.send_button
    assert button.text() == "Generate Reply" and button.isEnabled()
    assert "write the reply" in window.composer.editor.placeholderText()
    calls = len(engine.calls)
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(engine.calls) == calls + 1 and idle(window), timeout=5000)
    assert engine.calls[-1][0] == fork
    assert [w.text() for w in window.chat_view.message_widgets()][-1] == "a reply"
    assert button.text() == "Send" and not button.isEnabled()  # a reply is there: back to sending
    assert "Enter to send" in window.composer.editor.placeholderText()
    # The fork is told apart in the list: named for its parent, and its mark survives eliding.
    titles = {r.id: r.title for r in store.list_conversations()}
    assert titles[fork] == "first question (fork)" and titles[parent] == "first question"


def test_typing_in_a_fork_sends_as_usual(qtbot, window, engine):
    send(qtbot, window, "question")
    fork_at(window, 0)
    window.composer.set_text("another question")
    assert window.composer.send_button.text() == "Send"
    calls = len(engine.calls)
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(engine.calls) == calls + 1 and idle(window), timeout=5000)
    assert [m["content"] for m in engine.calls[-1][1]] == ["question", "another question"]


def test_a_forks_mark_is_never_elided(qapp):
    metrics = QFontMetrics(qapp.font())
    title = "A very long conversation title about the migration of the arctic tern (fork 2)"
    width = metrics.horizontalAdvance("A very long (fork 2)")
    shown = elide_title(metrics, title, width)
    assert shown.endswith("… (fork 2)") and metrics.horizontalAdvance(shown) <= width
    assert elide_title(metrics, "Short (fork)", 10_000) == "Short (fork)"


def test_new_instructions_are_read_at_once_with_the_label(qtbot, window, store, engine):
    engine.reply = "a reply"
    send(qtbot, window, "question")
    conv_id = window.chat.conv_id
    engine.prefill_progress = [PrefillProgress(0, 1000, 1000, 4096, 1000), PrefillProgress(400, 1000, 1000, 4096, 1000)]
    engine.reading = asyncio.Event()
    window.dialogs.save_chat_settings(conv_id, {"system_prompt": "Answer like a pirate."})
    status = window.status.state_label
    qtbot.waitUntil(lambda: status.text() == "Re-reading the chat for the new instructions… 40%", timeout=5000)
    assert engine.prefills[-1][0] == conv_id
    assert engine.prefills[-1][1] == [
        {"role": "system", "content": "Answer like a pirate."},
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "a reply"},
    ]
    engine.reading.set()
    qtbot.waitUntil(lambda: status.text() == "Ready", timeout=5000)


def test_a_model_switch_and_a_version_switch_read_the_chat_ahead(qtbot, window, engine):
    n = {"i": 0}

    def reply(_messages):
        n["i"] += 1
        return f"reply {n['i']}"

    engine.reply = reply
    send(qtbot, window, "question")
    conv_id = window.chat.conv_id
    before = len(engine.prefills)
    window.bridge.load_model("fake-big")
    qtbot.waitUntil(lambda: len(engine.prefills) == before + 1, timeout=5000)
    assert engine.prefills[-1][0] == conv_id and engine.prefills[-1][1][-1]["content"] == "reply 1"
    window.chat.regenerate()
    qtbot.waitUntil(lambda: idle(window) and n["i"] == 2, timeout=5000)
    window.chat_view.message_widgets()[-1].version_switcher.prev_button.click()
    qtbot.waitUntil(lambda: len(engine.prefills) == before + 2, timeout=5000)
    assert engine.prefills[-1][1][-1]["content"] == "reply 1"  # the version now shown


def test_a_turn_that_rereads_the_chat_says_so_in_the_reply_and_the_status_bar(qtbot, window, engine):
    engine.progress = [PrefillProgress(0, 3000, 3100, 4096, 2900), PrefillProgress(1290, 3000, 3100, 4096, 2900)]
    engine.reading = asyncio.Event()
    send(qtbot, window, "a question after new instructions", wait=False)
    live = window.chat_view.message_widgets()[-1]
    qtbot.waitUntil(lambda: "Re-reading the chat… 43%" in live.stats_label.text(), timeout=5000)
    assert window.status.state_label.text() == "Re-reading the chat… 43%"
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window), timeout=10_000)


def test_on_the_real_engine_a_fork_and_new_instructions_cost_only_the_new_message(qtbot, qloop, tiny_model_path):
    """The tiny model: the fork's first reply reuses all but one token of its prompt; after Chat
    Settings › OK the chat is read before Enter, which then reads only the new question."""
    from app.core.settings import DEFAULTS_KEY
    from tests.app.gui.test_window_engine import close_window, open_window
    from tests.app.gui.test_window_engine import send as send_real

    store, window = open_window(qtbot, tiny_model_path)
    store.set_state(DEFAULTS_KEY, {"max_tokens": 4, "temperature": 0.0})
    send_real(qtbot, window, "Tell me about the quick brown fox and the lazy dog, at length.")
    send_real(qtbot, window, "And what did the dog do then?")
    fork_at(window, 2)
    fork = window.chat.conv_id
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)  # Generate Reply
    qtbot.waitUntil(lambda: idle(window) and len(store.get_conversation(fork).messages) == 4, timeout=60_000)
    stats = store.get_conversation(fork).messages[-1].stats
    assert stats["reused_tokens"] == stats["prompt_tokens"] - 1 and stats["prefilled_tokens"] == 1

    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=60_000) as done:
        window.dialogs.save_chat_settings(fork, {"system_prompt": "Answer like a pirate.", "max_tokens": 4})
    read = done.args[1]
    assert read.finished and read.computed_tokens > 50
    send_real(qtbot, window, "Why?")
    stats = store.get_conversation(fork).messages[-1].stats
    assert stats["reused_tokens"] == read.prompt_tokens
    assert stats["prefilled_tokens"] < 40  # the question and the template around it (tiny vocabulary)
    close_window(qtbot, store, window)


def test_a_fork_whose_parent_has_no_cache_is_read_ahead_at_once(qtbot, window, engine):
    from engine.types import ForkedCache

    engine.reply = "a reply"
    send(qtbot, window, "first question")
    send(qtbot, window, "second question")
    parent = window.chat.conv_id

    async def nothing_to_copy(source_id, conv_id, messages, params=None):  # after a restart, or an eviction
        engine.forks.append((source_id, conv_id, list(messages)))
        return ForkedCache(0, 0, "the chat forked has no cache in memory or saved")  # as engine/local/fork.py

    engine.fork = nothing_to_copy
    engine.prefill_progress = [PrefillProgress(0, 30, 30, 4096, 30), PrefillProgress(12, 30, 30, 4096, 30)]
    engine.reading = asyncio.Event()
    prefills = len(engine.prefills)
    fork_at(window, 2)
    fork = window.chat.conv_id
    assert fork != parent
    status = window.status.state_label
    # seen on X: a fork of a chat from before a restart read all of it after Enter (4.3 s to the first token)
    qtbot.waitUntil(lambda: status.text() == "Reading the forked chat… 40%", timeout=5000)
    assert engine.prefills[prefills][0] == fork and len(engine.prefills[prefills][1]) == 3
    engine.reading.set()
    qtbot.waitUntil(lambda: status.text() == "Ready", timeout=5000)


def test_a_fork_that_got_its_parents_cache_is_not_read_again(qtbot, window, engine):
    send(qtbot, window, "question")
    prefills = len(engine.prefills)
    fork_at(window, 0)
    qtbot.waitUntil(lambda: len(engine.forks) == 1, timeout=5000)
    qtbot.waitUntil(lambda: not window.read_ahead.tasks, timeout=5000)
    assert len(engine.prefills) == prefills


def test_on_the_real_engine_a_fork_of_a_chat_without_a_cache_is_read_before_enter(qtbot, qloop, tiny_model_path):
    """The parent's cache is gone (forgotten here; after a restart or an eviction in use): the fork
    is read ahead as soon as it is made, so Generate Reply reads one token."""
    from app.core.settings import DEFAULTS_KEY
    from tests.app.gui.test_window_engine import close_window, open_window
    from tests.app.gui.test_window_engine import send as send_real
    from tests.app_helpers import run as run_real

    store, window = open_window(qtbot, tiny_model_path)
    store.set_state(DEFAULTS_KEY, {"max_tokens": 4, "temperature": 0.0})
    send_real(qtbot, window, "Tell me about the quick brown fox and the lazy dog, at length.")
    send_real(qtbot, window, "And what did the dog do then?")
    run_real(qtbot, window.bridge.engine.forget(window.chat.conv_id))
    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=60_000) as done:
        fork_at(window, 2)
    fork = window.chat.conv_id
    assert done.args[0] == fork and done.args[1].finished
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)  # Generate Reply
    qtbot.waitUntil(lambda: idle(window) and len(store.get_conversation(fork).messages) == 4, timeout=60_000)
    stats = store.get_conversation(fork).messages[-1].stats
    assert stats["reused_tokens"] == stats["prompt_tokens"] - 1 and stats["prefilled_tokens"] == 1
    close_window(qtbot, store, window)
