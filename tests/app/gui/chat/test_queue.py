"""Issue 15 §2.4: a message sent while a reply is being written (in another chat, or in the chat
that is writing) is queued, shown "Queued", and sent when that reply ends; Stop, deleting the
chat or closing the window takes it off the queue and leaves it a message without a reply."""

import asyncio

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core.store import MessageRole, MessageStatus
from app.gui.chat.queue import SendQueue
from app.gui.composer import PLACEHOLDER, PLACEHOLDER_HELD, PLACEHOLDER_WRITING
from engine.types import PrefillProgress
from tests.app_helpers import FakeEngine, run, send

pytestmark = pytest.mark.qt


def hold(engine):
    """Every reply waits in "Reading your message…" until engine.reading is set."""
    engine.progress = (PrefillProgress(0, 10, 10),)
    engine.reading = asyncio.Event()


def idle(w):
    return w.chat.gen is None and not w.bridge.is_generating()


def stored(store, conv_id):
    return [(m.role, m.content, m.status) for m in store.get_conversation(conv_id).messages]


def queued_note(w) -> str:
    return w.chat_view.message_widgets()[-1].stats_label.text()


def writing(qtbot, w, text):
    """Send text and wait until the engine holds its reply (hold()): "Reading your message… 0%"."""
    send(qtbot, w, text, wait=False)
    qtbot.waitUntil(lambda: w.chat.gen is not None and bool(w.chat.gen.reading), timeout=5000)
    return w.chat.conv_id


def test_messages_sent_from_other_chats_are_queued_and_sent_in_order(qtbot, window, store, engine):
    hold(engine)
    engine.reply = "an answer"
    first = writing(qtbot, window, "a long question")
    window.new_action.trigger()
    assert window.composer.send_button.text() == "Queue"
    assert "queued" in window.composer.reason_label.text()
    send(qtbot, window, "second chat's question", wait=False)
    second = window.chat.conv_id
    # Shown at once, marked, saved like any message; no reply exists yet; the composer is free.
    assert "Queued" in queued_note(window) and window.composer.text() == ""
    assert stored(store, second) == [(MessageRole.USER, "second chat's question", MessageStatus.COMPLETE)]
    assert window.composer.stop_button.isVisible() and "Cancel the queued" in window.composer.stop_button.toolTip()
    assert "queued" in window.composer.reason_label.text()
    assert window.composer.editor.placeholderText() == PLACEHOLDER_HELD
    window.new_action.trigger()
    send(qtbot, window, "third chat's question", wait=False)
    third = window.chat.conv_id
    assert [c[0] for c in engine.calls] == [first]
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 3, timeout=10_000)
    assert [c[0] for c in engine.calls] == [first, second, third]  # in the order queued
    assert engine.calls[1][1][-1] == {"role": "user", "content": "second chat's question"}
    assert window.chat.conv_id == third  # the open chat stays open; the others were answered in the background
    assert "Queued" not in queued_note(window) and window.chat_view.message_widgets()[-1].text() == "an answer"
    for conv_id in (first, second, third):
        assert [m[2] for m in stored(store, conv_id)] == [MessageStatus.COMPLETE] * 2
    window.chat.open_conversation(second)
    assert [w.text() for w in window.chat_view.message_widgets()] == ["second chat's question", "an answer"]


def test_enter_in_the_writing_chat_queues_the_next_turn(qtbot, window, store, engine):
    hold(engine)
    engine.reply = "the reply"
    conv_id = writing(qtbot, window, "first question")
    assert window.composer.editor.placeholderText() == PLACEHOLDER_WRITING
    send(qtbot, window, "and a follow-up", wait=False)
    widgets = window.chat_view.message_widgets()
    assert [w.role for w in widgets] == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.USER]
    assert "Queued" in queued_note(window) and window.composer.text() == ""
    # One queued message per chat: a third one is kept in the composer, and the composer says why.
    send(qtbot, window, "one more", wait=False)
    assert window.composer.text() == "one more" and "queued" in window.composer.reason_label.text()
    assert len(engine.calls) == 1
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 2, timeout=10_000)
    assert [m["content"] for m in engine.calls[1][1]] == ["first question", "the reply", "and a follow-up"]
    assert [(m[1], m[2]) for m in stored(store, conv_id)] == [
        ("first question", MessageStatus.COMPLETE),
        ("the reply", MessageStatus.COMPLETE),
        ("and a follow-up", MessageStatus.COMPLETE),
        ("the reply", MessageStatus.COMPLETE),
    ]
    assert [w.text() for w in window.chat_view.message_widgets()][-1] == "the reply"
    assert "Queued" not in window.chat_view.message_widgets()[2].stats_label.text()
    assert window.composer.text() == "one more"  # still there to send
    window.composer.set_text("")
    assert window.composer.editor.placeholderText() == PLACEHOLDER


def test_stop_cancels_a_queued_message_and_generate_reply_sends_it_later(qtbot, window, store, engine):
    hold(engine)
    engine.reply = "done"
    first = writing(qtbot, window, "keep writing")
    window.new_action.trigger()
    send(qtbot, window, "never mind", wait=False)
    second = window.chat.conv_id
    assert window.stop_action.isEnabled()
    window.stop_action.trigger()  # Esc
    assert second not in window.chat.queue and window.chat.gen.conv_id == first  # the other reply goes on
    assert "Queued" not in queued_note(window)
    assert window.composer.send_button.text() == "Generate Reply" and window.composer.send_button.isVisible()
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window), timeout=10_000)
    assert [c[0] for c in engine.calls] == [first]
    assert stored(store, second) == [(MessageRole.USER, "never mind", MessageStatus.COMPLETE)]  # no empty reply
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)  # Generate Reply
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 2, timeout=10_000)
    assert [m[1] for m in stored(store, second)] == ["never mind", "done"]


def test_stop_in_the_writing_chat_ends_the_reply_and_keeps_the_queued_one_unsent(qtbot, window, store, engine):
    hold(engine)
    conv_id = writing(qtbot, window, "first")
    send(qtbot, window, "second", wait=False)
    window.escape()
    engine.reading.set()  # the fake sees Stop at its first token
    qtbot.waitUntil(lambda: idle(window), timeout=10_000)
    assert len(engine.calls) == 1 and not window.chat.queue
    assert [(m[0], m[2]) for m in stored(store, conv_id)] == [
        (MessageRole.USER, MessageStatus.COMPLETE),
        (MessageRole.ASSISTANT, MessageStatus.STOPPED),
        (MessageRole.USER, MessageStatus.COMPLETE),
    ]
    assert window.composer.send_button.text() == "Generate Reply"


def test_generate_reply_while_another_chat_writes_is_queued(qtbot, window, store, engine):
    conv = store.create_conversation()
    store.add_message(conv.id, MessageRole.USER, "unanswered")
    hold(engine)
    first = writing(qtbot, window, "busy")
    window.chat.open_conversation(conv.id)
    assert window.composer.send_button.text() == "Generate Reply"
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    assert conv.id in window.chat.queue and "Queued" in queued_note(window)
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 2, timeout=10_000)
    assert [c[0] for c in engine.calls] == [first, conv.id]


def test_deleting_a_chat_takes_its_message_off_the_queue(qtbot, window, store, engine):
    hold(engine)
    first = writing(qtbot, window, "busy")
    window.new_action.trigger()
    send(qtbot, window, "doomed", wait=False)
    doomed = window.chat.conv_id
    window.chat.delete(doomed)
    assert doomed not in window.chat.queue and window.chat.gen.conv_id == first
    window.chat.undo_delete(doomed)  # back, as a message without a reply: nothing sends it behind the user's back
    assert "Queued" not in queued_note(window)
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window), timeout=10_000)
    assert [c[0] for c in engine.calls] == [first]
    assert stored(store, doomed) == [(MessageRole.USER, "doomed", MessageStatus.COMPLETE)]


def test_closing_while_queued_keeps_the_message_unanswered_with_generate_reply(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    hold(engine)
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    run(qtbot, w.start_engine("fake-small"))
    first = writing(qtbot, w, "busy")
    w.new_action.trigger()
    send(qtbot, w, "waiting when the window closed", wait=False)
    second = w.chat.conv_id
    w.close()
    engine.reading.set()
    run(qtbot, w.shutdown())
    assert len(engine.calls) == 1  # nothing was started while closing
    assert [(m[0], m[2]) for m in stored(store, first)] == [
        (MessageRole.USER, MessageStatus.COMPLETE),
        (MessageRole.ASSISTANT, MessageStatus.STOPPED),
    ]
    assert stored(store, second) == [(MessageRole.USER, "waiting when the window closed", MessageStatus.COMPLETE)]
    # Next start: the chat reopens (it was the last one) offering Generate Reply; nothing is sent by itself.
    again = FakeEngine()
    w2 = MainWindow(store, again)
    qtbot.addWidget(w2)
    w2.show()
    run(qtbot, w2.start_engine("fake-small"))
    assert w2.chat.conv_id == second and not w2.chat.queue and again.calls == []
    assert w2.composer.send_button.text() == "Generate Reply"
    QTest.keyClick(w2.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: idle(w2) and len(again.calls) == 1, timeout=10_000)
    assert again.calls[0][1][-1] == {"role": "user", "content": "waiting when the window closed"}
    w2.close()
    run(qtbot, w2.shutdown())


def test_the_queue_drops_what_no_longer_waits(store):
    conv = store.create_conversation()
    user = store.add_message(conv.id, MessageRole.USER, "a question")
    other = store.create_conversation()
    answered = store.add_message(other.id, MessageRole.USER, "answered already")
    store.add_message(other.id, MessageRole.ASSISTANT, "yes", parent_id=answered.id)
    queue = SendQueue()
    queue.add("no-such-chat", 1)
    queue.add(other.id, answered.id)
    queue.add(conv.id, user.id)
    queue.add(conv.id, user.id)  # one per chat
    assert len(queue) == 3
    item = queue.take_next(store)
    assert item is not None and (item.conv_id, item.msg_id) == (conv.id, user.id)
    assert not queue and queue.take_next(store) is None


def test_a_message_with_a_document_sent_while_another_chat_writes_is_planned_then_queued(
    qtbot, window, store, engine, tmp_path
):
    """Its documents are planned as it is sent (app/documents/turn.py prepare, as the terminal plans
    them); it is saved with them, shown "Queued", and sent as planned when the reply ends."""
    from app.core.document_block import message_content

    doc = tmp_path / "notes.txt"
    doc.write_text("Pears are green. " * 20)
    hold(engine)
    engine.reply = "an answer"
    first = writing(qtbot, window, "a long question")
    window.new_action.trigger()
    tray = window.composer.attachments
    tray.add_paths([str(doc)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    send(qtbot, window, "What colour are pears?", wait=False)
    qtbot.waitUntil(lambda: window.chat.conv_id in window.chat.queue, timeout=5000)
    second = window.chat.conv_id
    assert "Queued" in queued_note(window) and not tray.isVisible()
    (message,) = store.get_conversation(second).messages
    assert [a.name for a in message.attachments] == ["notes.txt"] and not message.attachments[0].passages
    engine.reading.set()
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 2, timeout=10_000)
    assert [c[0] for c in engine.calls] == [first, second]
    sent = engine.calls[1][1][-1]["content"]
    assert sent == message_content("What colour are pears?", [message.attachments[0].for_message()])
