"""A database made by the release before migrations 3 and 4 opens and migrates.

tests/app/core/data/schema2.db was written by that release's Store (commit 7e5a38d; schema 2 with
the attachments table added by inspecting the schema): chat A ("With a document and tools off")
has a user message with one document and a reply, and the servers calc and files off; chat B
("Every server on") has one message. The app state `chat_tools_off` held A's choice, the blank
chat's ("") and a deleted chat's.
"""

import sqlite3

import pytest

from app.core.attachments import StoredAttachment
from app.core.settings import TOOLS_OFF_KEY, set_tools_off, tools_off
from app.core.store import MIGRATIONS, SCHEMA_VERSION, Store
from app.transcripts.export import to_json
from app.transcripts.json_import import import_conversation
from tests.app.core.old_release import DATA, raw_copy, store_from

FIXTURE = DATA / "schema2.db"
A = "17c9da28-3ae8-4a20-a03d-794bba91f4b3"
B = "55744b90-2966-4fa0-a07d-8552529f45db"


@pytest.fixture
def old_store(chinwag_home):
    yield from store_from(FIXTURE, chinwag_home)


def test_the_fixture_is_the_previous_release(tmp_path):
    raw = raw_copy(FIXTURE, tmp_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    assert raw.execute("SELECT value FROM state WHERE key='chat_tools_off'").fetchone() is not None
    raw.close()


def test_an_old_database_migrates_keeping_every_message_and_document(old_store, chinwag_home):
    assert not old_store.read_only and old_store.notice == ""
    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
    raw.close()
    a = old_store.get_conversation(A)
    assert [(m.role, m.content) for m in a.messages] == [
        ("user", "What does it say?"),
        ("assistant", "It says hello world."),
    ]
    (document,) = a.messages[0].attachments
    assert (document.name, document.text) == ("notes.txt", "hello world")
    assert a.settings["system_prompt"] == "Be brief." and a.settings["temperature"] == 0.5


def test_a_chats_tool_choice_becomes_its_setting_and_the_app_state_goes(old_store):
    assert old_store.conversation_settings(A)[TOOLS_OFF_KEY] == ["calc", "files"]
    assert tools_off(old_store, A) == {"calc", "files"}
    assert TOOLS_OFF_KEY not in old_store.conversation_settings(B) and tools_off(old_store, B) == set()
    assert old_store.get_state("chat_tools_off") is None  # the blank chat's and the deleted chat's went too


def test_the_tool_choice_is_exported_imported_and_deleted_with_the_chat(old_store, tmp_path):
    export = tmp_path / "a.json"
    export.write_text(to_json(old_store.get_conversation(A)), encoding="utf-8")
    copy = import_conversation(old_store, export)
    assert tools_off(old_store, copy.id) == {"calc", "files"}
    set_tools_off(old_store, copy.id, set())  # every server on again: the key goes
    assert TOOLS_OFF_KEY not in old_store.conversation_settings(copy.id)
    old_store.delete_conversation(A)
    assert tools_off(old_store, A) == set()
    assert old_store.get_state("chat_tools_off") is None


def test_a_bad_tool_choice_in_an_export_is_refused_in_one_line(old_store, tmp_path):
    text = to_json(old_store.get_conversation(A)).replace('"tools_off": [\n', '"tools_off": [\n      1,\n', 1)
    assert '"tools_off": [\n      1,' in text
    export = tmp_path / "bad.json"
    export.write_text(text, encoding="utf-8")
    with pytest.raises(Exception, match="settings.tools_off .* is not a list of names"):
        import_conversation(old_store, export)


def test_a_database_that_never_had_the_attachments_table_gets_it(chinwag_home):
    path = chinwag_home / "chinwag.db"
    raw = sqlite3.connect(path)
    for number, script in enumerate(MIGRATIONS[:2]):  # schema 2 as an older release left it: no attachments
        raw.executescript(f"BEGIN; {script}; PRAGMA user_version = {number + 1}; COMMIT;")
    raw.execute("INSERT INTO conversations (id, title, created_at, updated_at) VALUES ('c', 'Old', 1, 1)")
    raw.execute("INSERT INTO state (key, value) VALUES ('chat_tools_off', 'not json')")
    raw.commit()
    raw.close()
    path.chmod(0o600)
    store = Store()
    try:
        conv = store.get_conversation("c")
        assert conv.title == "Old" and conv.settings == {}
        document = StoredAttachment("a.txt", "text", 2, "1" * 64, "hi")
        msg = store.add_message("c", "user", "Hi", attachments=[document])
        (shown,) = store.get_conversation("c").messages
        assert shown.id == msg.id and shown.attachments == [document]
        assert store.get_state("chat_tools_off") is None
    finally:
        store.close()
