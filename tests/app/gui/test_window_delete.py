"""Deleting a chat from the window: a long chat deletes and its cache is forgotten; a delete that
fails is one line, leaves the chat whole and listed, and forgets nothing."""

import sqlite3
import time

import pytest

from tests.app_helpers import send

pytestmark = pytest.mark.qt


def test_a_long_chat_deletes_and_is_forgotten(qtbot, window, store, engine):
    conv = store.create_conversation("long")
    with sqlite3.connect(store.path) as db:
        parent = None
        for i in range(1_500):  # past SQLite's 1,000 nested cascades
            parent = db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, status, created_at, parent_id)"
                " VALUES (?, ?, ?, ?, 'complete', ?, ?)",
                (conv.id, i, ("user", "assistant")[i % 2], f"m{i}", time.time(), parent),
            ).lastrowid
    window.chat.refresh_list()
    window.chat.delete(conv.id)
    window.chat._commit_delete(conv.id)  # what the Undo timer does when it runs out
    assert store.list_conversations() == []
    assert window.notices.bar("error") is None
    qtbot.waitUntil(lambda: conv.id in engine.forgotten, timeout=2000)


def test_a_failed_delete_is_one_line_and_leaves_the_chat_whole(qtbot, window, store, engine):
    engine.reply = "kept"
    send(qtbot, window, "keep me")
    conv_id = window.chat.conv_id
    with sqlite3.connect(store.path) as db:  # a hand-edited database that refuses the delete
        db.execute(
            "CREATE TRIGGER keep BEFORE DELETE ON conversations BEGIN SELECT RAISE(ABORT, 'kept by a trigger'); END"
        )
    window.chat.delete(conv_id)
    assert conv_id not in window.sidebar.ids()
    window.chat._commit_delete(conv_id)
    error = window.notices.bar("error").text()
    assert "\n" not in error and error
    assert conv_id in window.sidebar.ids()  # listed again
    assert [m.content for m in store.get_conversation(conv_id).messages] == ["keep me", "kept"]  # nothing half-done
    with sqlite3.connect(store.path) as db:  # once it may: deleted, and forgotten once (not by the failure)
        db.execute("DROP TRIGGER keep")
    window.chat.delete(conv_id)
    window.chat._commit_delete(conv_id)
    assert store.list_conversations() == []
    qtbot.waitUntil(lambda: conv_id in engine.forgotten, timeout=2000)
    assert engine.forgotten.count(conv_id) == 1
