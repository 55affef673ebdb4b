"""Reply versions in the store: the message tree, its shown path, migration, fork, JSON."""

import json
import sqlite3

import pytest

from app.core.store import MIGRATIONS, SCHEMA_VERSION, NotFoundError, Store
from app.transcripts.export import export_conversation, to_markdown
from app.transcripts.json_import import import_conversation


def texts(conv):
    return [m.content for m in conv.messages]


def test_regenerate_and_edit_keep_every_version(store):
    c = store.create_conversation()
    u1 = store.add_message(c.id, "user", "Q1")
    a1 = store.add_message(c.id, "assistant", "A1")
    a2 = store.add_message(c.id, "assistant", "A2", parent_id=u1.id)  # regenerate
    assert (a2.version, a2.versions) == (2, 2)
    conv = store.get_conversation(c.id)
    assert texts(conv) == ["Q1", "A2"] and len(conv.tree) == 3
    assert [(m.version, m.versions) for m in conv.messages] == [(1, 1), (2, 2)]
    assert store.versions(a2.id) == [a1.id, a2.id]

    store.add_message(c.id, "user", "Q2")  # continues from the version shown
    store.select_version(a1.id)
    assert texts(store.get_conversation(c.id)) == ["Q1", "A1"]
    store.select_version(a2.id)  # back: the branch under A2 is remembered
    assert texts(store.get_conversation(c.id)) == ["Q1", "A2", "Q2"]

    e1 = store.add_message(c.id, "user", "Q1 edited", parent_id=None)  # edit the first message
    store.add_message(c.id, "assistant", "A3")
    assert texts(store.get_conversation(c.id)) == ["Q1 edited", "A3"]
    store.select_version(u1.id)
    assert texts(store.get_conversation(c.id)) == ["Q1", "A2", "Q2"]
    assert store.versions(u1.id) == [u1.id, e1.id]


def test_delete_from_removes_a_branch_and_shows_a_sibling(store):
    c = store.create_conversation()
    u1 = store.add_message(c.id, "user", "Q1")
    a1 = store.add_message(c.id, "assistant", "A1")
    a2 = store.add_message(c.id, "assistant", "A2", parent_id=u1.id)
    store.add_message(c.id, "user", "Q2")
    store.delete_messages_from(c.id, a2.id)
    conv = store.get_conversation(c.id)
    assert texts(conv) == ["Q1", "A1"] and len(conv.tree) == 2 and conv.messages[1].id == a1.id


def test_fork_copies_the_shown_path_up_to_a_message(store):
    c = store.create_conversation(settings={"temperature": 0.2})
    u1 = store.add_message(c.id, "user", "Q1")
    store.add_message(c.id, "assistant", "A1")
    a2 = store.add_message(c.id, "assistant", "A2", parent_id=u1.id)
    store.add_message(c.id, "user", "Q2")
    fork = store.fork_conversation(c.id, a2.id)
    assert fork.id != c.id and fork.title.endswith("(fork)") and fork.settings == {"temperature": 0.2}
    assert texts(store.get_conversation(fork.id)) == ["Q1", "A2"]
    assert texts(store.get_conversation(c.id)) == ["Q1", "A2", "Q2"]  # the original is untouched
    with pytest.raises(NotFoundError):
        store.fork_conversation(c.id, 10_000)


def test_forks_are_named_apart_from_each_other_and_from_their_parent(store):
    c = store.create_conversation()
    q = store.add_message(c.id, "user", "How do tides work?")
    first = store.fork_conversation(c.id, q.id)
    second = store.fork_conversation(c.id, q.id)
    of_fork = store.fork_conversation(first.id, store.get_conversation(first.id).messages[0].id)
    assert [first.title, second.title, of_fork.title] == [
        "How do tides work? (fork)",
        "How do tides work? (fork 2)",
        "How do tides work? (fork 3)",  # a fork of a fork: numbered from the same base
    ]


def test_unknown_parent_is_refused(store):
    c = store.create_conversation()
    with pytest.raises(NotFoundError):
        store.add_message(c.id, "user", "x", parent_id=12345)
    assert store.get_conversation(c.id).tree == []


def _v1_database(path):
    """A database exactly as the previous schema (version 1) wrote it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(f"BEGIN; {MIGRATIONS[0]}; PRAGMA user_version = 1; COMMIT;")
    conn.execute("INSERT INTO conversations VALUES ('c1', 'Loops', 1.0, 5.0, 'm', '{\"temperature\": 0.5}')")
    conn.execute("INSERT INTO conversations VALUES ('c2', 'Empty', 2.0, 2.0, '', '{}')")
    rows = [
        ("user", "How?", "complete"),
        ("assistant", "Like this.", "complete"),
        ("user", "And?", "complete"),
        ("assistant", "Half", "stopped"),
    ]
    for pos, (role, content, status) in enumerate(rows):
        conn.execute(
            "INSERT INTO messages (conversation_id, position, role, content, status, created_at, model_id, stats)"
            " VALUES ('c1', ?, ?, ?, ?, ?, 'm', ?)",
            (pos, role, content, status, 1.0 + pos, '{"generated_tokens": 3}' if role == "assistant" else None),
        )
    conn.execute("INSERT INTO state VALUES ('last_conversation', '\"c1\"')")
    conn.close()


def test_migration_from_the_previous_schema_loses_nothing(chinwag_home):
    path = chinwag_home / "chinwag.db"
    _v1_database(path)
    with Store(path) as store:
        assert not store.read_only and not store.notice
        conv = store.get_conversation("c1")
        assert [(m.role, m.content, m.status) for m in conv.messages] == [
            ("user", "How?", "complete"),
            ("assistant", "Like this.", "complete"),
            ("user", "And?", "complete"),
            ("assistant", "Half", "stopped"),
        ]
        assert conv.messages[1].stats == {"generated_tokens": 3} and conv.settings == {"temperature": 0.5}
        assert [m.parent_id for m in conv.messages] == [None] + [m.id for m in conv.messages[:-1]]
        assert all(m.versions == 1 for m in conv.messages) and len(conv.tree) == 4
        assert store.get_conversation("c2").messages == []
        assert store.get_state("last_conversation") == "c1"
        assert [r.id for r in store.list_conversations()] == ["c1", "c2"]
        # The migrated chat grows and branches like a new one.
        store.add_message("c1", "assistant", "Whole", parent_id=conv.messages[2].id)
        assert texts(store.get_conversation("c1"))[-1] == "Whole"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


def test_json_round_trips_every_version_and_text_formats_show_the_path(store, tmp_path):
    c = store.create_conversation(title="Versions")
    u1 = store.add_message(c.id, "user", "Q1")
    store.add_message(c.id, "assistant", "first answer")
    store.add_message(c.id, "assistant", "second answer", parent_id=u1.id)
    store.add_message(c.id, "user", "Q2")
    store.add_message(c.id, "user", "Q2 edited", parent_id=store.get_conversation(c.id).messages[1].id)
    store.select_version(store.get_conversation(c.id).messages[2].id)
    conv = store.get_conversation(c.id)
    assert texts(conv) == ["Q1", "second answer", "Q2 edited"]

    path = export_conversation(conv, "json", tmp_path / "v.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert [m["content"] for m in data["messages"]] == texts(conv)
    assert len(data["tree"]) == 5 and data["tree"][2]["parent"] == 0
    again = store.get_conversation(import_conversation(store, path).id)
    assert texts(again) == texts(conv)
    assert [(m.content, m.active, m.version, m.versions) for m in again.tree] == [
        (m.content, m.active, m.version, m.versions) for m in conv.tree
    ]
    md = to_markdown(conv)
    assert "version 2 of 2" in md  # the reply shown says which version it is
    assert "second answer" in md and "first answer" not in md and "Q2 edited" in md and "\nQ2\n" not in md


@pytest.mark.parametrize(
    "tree, error",
    [
        ("x", '"tree" is not a list'),
        ([{"role": "user", "content": "a", "parent": 0}], "tree[0].parent is not the index of an earlier message"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": "b", "parent": True}], "tree[1].parent"),
        ([{"role": "user", "content": "a", "active": "yes"}], "tree[0].active is not true or false"),
    ],
)
def test_bad_tree_in_json_is_refused_and_nothing_written(store, tmp_path, tree, error):
    from engine.errors import ChinwagError

    path = tmp_path / "bad.json"
    path.write_text(
        json.dumps({"format": "chinwag-conversation", "version": 1, "conversation": {}, "messages": [], "tree": tree}),
        encoding="utf-8",
    )
    with pytest.raises(ChinwagError, match=error.replace("[", r"\[").replace("]", r"\]")):
        import_conversation(store, path)
    assert store.list_conversations() == []


def test_conversation_list_counts_the_shown_messages(store, tmp_path):
    c = store.create_conversation()
    u1 = store.add_message(c.id, "user", "Q1")
    store.add_message(c.id, "assistant", "A1")
    store.add_message(c.id, "user", "Q2")
    store.add_message(c.id, "assistant", "A1 again", parent_id=u1.id)
    assert [r.message_count for r in store.list_conversations()] == [2]
    assert [r.message_count for r in store.list_conversations("again")] == [2]
    # An import that marks no (or two) versions shown still shows one of each.
    path = tmp_path / "two.json"
    path.write_text(
        json.dumps(
            {
                "format": "chinwag-conversation",
                "version": 1,
                "conversation": {},
                "messages": [],
                "tree": [
                    {"role": "user", "content": "q", "active": False},
                    {"role": "assistant", "content": "a", "parent": 0},
                    {"role": "assistant", "content": "b", "parent": 0},
                ],
            }
        ),
        encoding="utf-8",
    )
    imported = import_conversation(store, path)
    assert texts(store.get_conversation(imported.id)) == ["q", "b"]
    assert {r.id: r.message_count for r in store.list_conversations()}[imported.id] == 2


def test_cli_lists_exports_and_imports_a_chat_with_versions(capsys, tmp_path):
    from app.cli.transcripts import main

    with Store() as store:
        c = store.create_conversation(title="Branches")
        u1 = store.add_message(c.id, "user", "Q1")
        store.add_message(c.id, "assistant", "old answer")
        store.add_message(c.id, "assistant", "new answer", parent_id=u1.id)
    assert main(["conversations", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["messages"] == 2
    for fmt in ("json", "md", "txt", "html"):
        assert main(["export", c.id[:8], "--format", fmt, "-o", str(tmp_path / f"c.{fmt}")]) == 0
    capsys.readouterr()
    assert "new answer" in (tmp_path / "c.md").read_text("utf-8")
    assert "old answer" not in (tmp_path / "c.txt").read_text("utf-8")
    assert main(["import-conversation", str(tmp_path / "c.json")]) == 0
    with Store() as store:
        imported = next(r.id for r in store.list_conversations() if r.id != c.id)
        again = store.get_conversation(imported)
        assert texts(again) == ["Q1", "new answer"] and [m.content for m in again.tree] == [
            "Q1",
            "old answer",
            "new answer",
        ]


def test_switching_versions_is_not_activity(store):
    a = store.create_conversation()
    u = store.add_message(a.id, "user", "Q")
    first = store.add_message(a.id, "assistant", "A1")
    store.add_message(a.id, "assistant", "A2", parent_id=u.id)
    b = store.create_conversation()
    store.add_message(b.id, "user", "newer chat")
    store.select_version(first.id)
    assert [r.id for r in store.list_conversations()] == [b.id, a.id]
