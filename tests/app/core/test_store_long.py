"""Long chats and hand-edited trees: a chat of any length deletes, exports and imports; deleting a
chat deletes exactly its own messages; an export of an odd tree is one that import accepts."""

import json
import sqlite3
import time

from app.cli.main import main
from app.core.store import Store
from app.transcripts.export import to_json

LONG = 10_000


def hand_edit(store: Store, sql: str, *args) -> None:
    """Change the database as a user with the sqlite3 shell would (foreign keys off there by default)."""
    with sqlite3.connect(store.path) as db:
        db.execute(sql, args)


def long_chat(store: Store, n: int = LONG, title: str = "long") -> str:
    conv = store.create_conversation(title)
    with sqlite3.connect(store.path) as db:
        parent = None
        for i in range(n):
            parent = db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, status, created_at, parent_id)"
                " VALUES (?, ?, ?, ?, 'complete', ?, ?)",
                (conv.id, i, ("user", "assistant")[i % 2], f"message {i}", time.time(), parent),
            ).lastrowid
    return conv.id


def shown(store: Store, conv_id: str) -> list:
    return [(m.role, m.content) for m in store.get_conversation(conv_id).messages]


def test_a_chat_of_ten_thousand_messages_exports_imports_and_deletes(store, tmp_path, capsys):
    conv_id = long_chat(store)
    other = long_chat(store, 3, "other")
    out = tmp_path / "long.json"
    assert main(["export", conv_id, "-o", str(out)]) == 0
    assert main(["import-conversation", str(out)]) == 0
    capsys.readouterr()
    (imported,) = [c.id for c in store.list_conversations() if c.id not in (conv_id, other)]
    assert shown(store, imported) == shown(store, conv_id) and len(shown(store, imported)) == LONG
    store.delete_conversation(conv_id)
    store.delete_conversation(imported)
    assert [c.id for c in store.list_conversations()] == [other] and len(shown(store, other)) == 3
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 3


def test_deleting_from_early_in_a_long_chat_deletes_the_rest(store):
    conv_id = long_chat(store, 2_000)
    second = store.get_conversation(conv_id).messages[1]
    store.delete_messages_from(conv_id, second.id)
    assert shown(store, conv_id) == [("user", "message 0")]


def test_deleting_a_chat_deletes_exactly_its_own_messages(store):
    first, second = long_chat(store, 4, "first"), long_chat(store, 4, "second")
    before = shown(store, second)
    # A hand-edited database: the second chat's third message follows a message of the first chat.
    borrowed = store.get_conversation(first).messages[1].id
    hand_edit(store, "UPDATE messages SET parent_id=? WHERE conversation_id=? AND position=2", borrowed, second)
    store.delete_conversation(first)
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM messages WHERE conversation_id=?", (second,)).fetchone()[0] == 4
    assert shown(store, second) == before[:2]  # what it showed already: its own first two
    store.delete_messages_from(second, store.get_conversation(second).messages[0].id)
    with sqlite3.connect(store.path) as db:  # its branch only: the detached messages are its own, and stay
        assert db.execute("SELECT count(*) FROM messages WHERE conversation_id=?", (second,)).fetchone()[0] == 2


def test_deleting_from_a_message_never_reaches_into_another_chat(store):
    first, second = long_chat(store, 4, "first"), long_chat(store, 4, "second")
    borrowed = store.get_conversation(first).messages[1].id
    hand_edit(store, "UPDATE messages SET parent_id=? WHERE conversation_id=? AND position=2", borrowed, second)
    store.delete_messages_from(first, borrowed)
    assert shown(store, first) == [("user", "message 0")]
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT count(*) FROM messages WHERE conversation_id=?", (second,)).fetchone()[0] == 4


def import_export_of(store, conv_id, tmp_path, capsys) -> str:
    """Export with the CLI, import it back; the new chat's id (import refusing fails the test)."""
    out = tmp_path / f"{conv_id}.json"
    assert main(["export", conv_id, "-o", str(out)]) == 0
    assert main(["import-conversation", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return next(c.id for c in store.list_conversations() if c.id != conv_id)


def test_a_message_that_is_its_own_parent_exports_what_import_accepts(store, tmp_path, capsys):
    conv_id = long_chat(store, 4)
    store.add_message(
        conv_id, "assistant", "a second version", parent_id=store.get_conversation(conv_id).messages[2].id
    )
    odd = store.get_conversation(conv_id).messages[-1].id
    hand_edit(store, "UPDATE messages SET parent_id=id, active=1 WHERE id=?", odd)
    before = shown(store, conv_id)
    imported = import_export_of(store, conv_id, tmp_path, capsys)
    assert shown(store, imported) == before
    tree = store.get_conversation(imported).tree
    assert len(tree) == 5 and "a second version" in [m.content for m in tree]  # kept, not shown
    store.delete_conversation(conv_id)
    assert shown(store, imported) == before


def test_cycles_and_parents_after_their_children_export_what_import_accepts(store, tmp_path, capsys):
    conv_id = long_chat(store, 6)
    ids = [m.id for m in store.get_conversation(conv_id).tree]
    # Message 4 and 5 follow each other; message 1 is moved to the end of the creation order.
    hand_edit(store, "UPDATE messages SET parent_id=? WHERE id=?", ids[5], ids[4])
    hand_edit(store, "UPDATE messages SET position=99 WHERE id=?", ids[1])
    before = shown(store, conv_id)
    assert before == [
        ("user", "message 0"),
        ("assistant", "message 1"),
        ("user", "message 2"),
        ("assistant", "message 3"),
    ]
    data = json.loads(to_json(store.get_conversation(conv_id)))
    assert len(data["tree"]) == 6
    imported = import_export_of(store, conv_id, tmp_path, capsys)
    assert shown(store, imported) == before
    assert sorted(m.content for m in store.get_conversation(imported).tree) == [f"message {i}" for i in range(6)]
    store.delete_conversation(conv_id)  # a cycle deletes too
    assert [c.id for c in store.list_conversations()] == [imported]
