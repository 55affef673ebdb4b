"""ChatController without a MainWindow: a fake view made from the ChatWindowView Protocol
(create_autospec, so a method the Protocol lacks fails here), the real EngineBridge on the fake
engine, and a real Store. The controller reads the conversation from the store, not the view."""

import inspect
from unittest.mock import call, create_autospec

import pytest

from app.core.store import MessageRole, MessageStatus
from app.gui.chat.controller import ChatController
from app.gui.chat.message_widget import QUEUED
from app.gui.chat.panes import ChatPanes, ChatWindowView
from app.gui.engine_bridge import EngineBridge
from tests.app_helpers import run

pytestmark = pytest.mark.qt


@pytest.fixture
def view():
    fake = create_autospec(ChatWindowView, instance=True, spec_set=True)
    fake.composer_text.return_value = ""
    fake.can_queue.return_value = False
    return fake


@pytest.fixture
def bridge(qtbot, qloop, engine):
    b = EngineBridge(engine)
    yield b
    run(qtbot, b.aclose())


def loaded(qtbot, bridge):
    run(qtbot, bridge.start("fake-small"))
    assert bridge.current_model is not None
    return bridge


def test_the_window_panes_implement_every_view_method_with_its_parameters():
    for name, member in inspect.getmembers(ChatWindowView, inspect.isfunction):
        if name.startswith("_"):
            continue
        mine = getattr(ChatPanes, name, None)
        assert mine is not None, f"ChatPanes lacks {name}"
        assert list(inspect.signature(mine).parameters) == list(inspect.signature(member).parameters), name


def test_send_saves_the_message_first_and_streams_the_reply_into_the_view(qtbot, store, bridge, engine, view):
    chat = ChatController(store, loaded(qtbot, bridge), view)
    assert chat.send("Hi there")
    conv = store.get_conversation(chat.conv_id)
    user = conv.messages[0]
    assert (user.role, user.content) == (MessageRole.USER, "Hi there")  # saved before the engine answers
    view.add_message.assert_any_call(user.id, MessageRole.USER, "Hi there", versions=(1, 1))
    qtbot.waitUntil(lambda: chat.gen is None, timeout=5000)
    reply = store.get_conversation(chat.conv_id).messages[-1]
    assert reply.role == MessageRole.ASSISTANT and reply.status == MessageStatus.COMPLETE
    assert reply.content == engine.reply
    assert "".join(c.args[0] for c in view.append_delta.call_args_list) == engine.reply
    view.begin_stream.assert_called_once_with(reply.id)
    assert view.end_stream.call_args.args[0] == MessageStatus.COMPLETE
    assert engine.calls[0][1][-1] == {"role": "user", "content": "Hi there"}
    assert view.set_generating.call_args_list[-1] == call(False, "", "")


def test_regenerate_reads_the_last_message_from_the_store(qtbot, store, bridge, engine, view):
    conv = store.create_conversation()
    user = store.add_message(conv.id, MessageRole.USER, "Question")
    old = store.add_message(conv.id, MessageRole.ASSISTANT, "Old answer", parent_id=user.id)
    chat = ChatController(store, loaded(qtbot, bridge), view)
    chat.open_conversation(conv.id)
    view.show_messages.assert_called_once()
    assert not chat.regenerate(user.id)  # only the last reply can be written again
    assert chat.regenerate()
    view.remove_messages_from.assert_called_once_with(old.id)
    qtbot.waitUntil(lambda: chat.gen is None, timeout=5000)
    assert len(store.versions(old.id)) == 2  # the new reply is another version beside the old one
    shown = store.get_conversation(conv.id).messages
    assert [m.content for m in shown] == ["Question", engine.reply]


def test_a_last_message_without_reply_is_answered_by_regenerate(qtbot, store, bridge, engine, view):
    conv = store.create_conversation()
    store.add_message(conv.id, MessageRole.USER, "Still waiting")
    chat = ChatController(store, loaded(qtbot, bridge), view)
    chat.open_conversation(conv.id)
    assert chat.regenerate()
    qtbot.waitUntil(lambda: chat.gen is None, timeout=5000)
    assert store.get_conversation(conv.id).messages[-1].content == engine.reply


def test_edit_takes_the_stored_text_and_only_for_user_messages(qtbot, store, bridge, view):
    conv = store.create_conversation()
    user = store.add_message(conv.id, MessageRole.USER, "Original question")
    reply = store.add_message(conv.id, MessageRole.ASSISTANT, "An answer", parent_id=user.id)
    chat = ChatController(store, bridge, view)
    chat.open_conversation(conv.id)
    chat.edit_message(reply.id)
    assert chat.editing is None and not view.set_editing.called
    chat.edit_message(user.id)
    assert chat.editing == user.id
    view.set_composer_text.assert_called_once_with("Original question")
    view.set_editing.assert_called_once_with(True)
    chat.cancel_edit()
    assert chat.editing is None and view.set_editing.call_args == call(False)


def test_a_message_sent_while_loading_is_queued_then_unqueued(qtbot, store, bridge, view):
    view.can_queue.return_value = True  # the window says a model is on its way
    chat = ChatController(store, bridge, view)
    assert chat.send("Wait for it")
    msg = store.get_conversation(chat.conv_id).messages[-1]
    assert chat.conv_id in chat.queue
    view.set_message_status.assert_called_with(msg.id, QUEUED)
    assert not chat.send("A second one")  # one message waits in a chat
    chat.unqueue()
    assert not chat.queue
    view.set_message_status.assert_called_with(msg.id, MessageStatus.COMPLETE)
    assert not chat.send_queued()  # nothing waits any more


def test_copy_copies_the_stored_text(qtbot, store, bridge, view):
    from PySide6.QtGui import QGuiApplication

    conv = store.create_conversation()
    user = store.add_message(conv.id, MessageRole.USER, "Copy **me** whole")
    chat = ChatController(store, bridge, view)
    chat.open_conversation(conv.id)
    chat.copy_message(user.id)
    assert QGuiApplication.clipboard().text() == "Copy **me** whole"


def test_new_chat_clears_the_view_and_focuses_the_composer(qtbot, store, bridge, view):
    conv = store.create_conversation()
    store.add_message(conv.id, MessageRole.USER, "Hello")
    chat = ChatController(store, bridge, view)
    chat.open_conversation(conv.id)
    view.select_conversation.assert_called_with(conv.id)
    chat.new_conversation()
    assert chat.conv_id is None
    view.clear_messages.assert_called_once_with()
    view.select_conversation.assert_called_with(None)
    view.focus_composer.assert_called_once_with()
