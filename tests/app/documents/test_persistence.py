"""Attachments stored with their message (one transaction), originals kept 0600 within a budget and erased
with the chat, the table added by inspecting the schema, and exports: JSON round trip, sections and blocks."""

import os
import sqlite3
import stat

import pytest

from app.core import attachments as attached
from app.core.attachments import StoredAttachment, keep_original, message_text, original_path
from app.core.document_block import message_content
from app.core.settings import engine_messages
from app.core.store import SCHEMA_VERSION, Store
from app.documents.extract import extract
from app.transcripts.export import export_conversation, to_html, to_markdown, to_text
from app.transcripts.json_import import import_conversation
from engine.errors import ChinwagError
from tests.app.documents.files import write_pdf


def _stored(doc) -> StoredAttachment:
    return StoredAttachment(doc.name, doc.kind, doc.size, doc.sha256, doc.text)


@pytest.fixture
def report(tmp_path):
    return extract(write_pdf(tmp_path / "report.pdf", ["Apples are red.", "Pears are green."]))


def test_saved_with_the_message_and_sent_as_a_block(store, report):
    conv = store.create_conversation()
    keep_original(report.sha256, report.original)
    msg = store.add_message(conv.id, "user", "What colour are pears?", attachments=[_stored(report)])
    assert msg.attachments == [_stored(report)]
    loaded = store.get_conversation(conv.id)
    assert loaded.title == "What colour are pears?"  # the question titles the chat, not the document
    assert loaded.messages[0].attachments == [_stored(report)]
    expected = message_content("What colour are pears?", [_stored(report).for_message()])
    assert message_text(loaded.messages[0]) == expected
    assert engine_messages(loaded.messages, "") == [{"role": "user", "content": expected}]
    path = original_path(report.sha256)
    assert path is not None and path.read_bytes() == report.original
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_nothing_half_written(store, report):
    conv = store.create_conversation()
    with pytest.raises(ChinwagError):
        store.add_message(conv.id, "user", "q", status="bogus", attachments=[_stored(report)])
    bad = StoredAttachment(report.name, report.kind, report.size, report.sha256, None)  # type: ignore[arg-type]
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message(conv.id, "user", "q", attachments=[_stored(report), bad])
    assert store.get_conversation(conv.id).messages == []
    assert store._db().execute("SELECT count(*) FROM attachments").fetchone()[0] == 0


def test_deleting_the_chat_erases_rows_and_originals(store, report, tmp_path):
    keep = store.create_conversation()
    gone = store.create_conversation()
    other = extract(write_pdf(tmp_path / "other.pdf", ["Other text."]))
    for doc in (report, other):
        keep_original(doc.sha256, doc.original)
    store.add_message(keep.id, "user", "a", attachments=[_stored(report)])
    store.add_message(gone.id, "user", "b", attachments=[_stored(report), _stored(other)])
    store.delete_conversation(gone.id)
    assert original_path(other.sha256) is None  # only that chat had it
    assert original_path(report.sha256) is not None  # still attached in another chat
    assert store._db().execute("SELECT count(*) FROM attachments").fetchone()[0] == 1
    store.delete_conversation(keep.id)
    assert original_path(report.sha256) is None


def test_originals_budget_drops_the_oldest(tmp_path):
    first, second = b"a" * 1000, b"b" * 1000
    keep_original("1" * 64, first, budget=1500)
    os.utime(original_path("1" * 64), (1, 1))
    keep_original("2" * 64, second, budget=1500)
    assert original_path("1" * 64) is None and original_path("2" * 64) is not None


def test_the_table_comes_with_migration_3_and_a_database_without_it_shows_no_documents(chinwag_home, report):
    with Store() as s:
        conv = s.create_conversation()
        s.add_message(conv.id, "user", "q", attachments=[_stored(report)])
    with Store() as s:  # opened again: the table is kept
        assert s.get_conversation(conv.id).messages[0].attachments == [_stored(report)]
    db = sqlite3.connect(chinwag_home / "chinwag.db")
    db.execute("DROP TABLE attachments")  # hand-damaged: read-only, it shows the messages without documents
    db.commit()
    db.close()
    with Store(read_only=True) as s:
        assert s.get_conversation(conv.id).messages[0].attachments == []
    db = sqlite3.connect(chinwag_home / "chinwag.db")
    db.execute("DROP TABLE tool_results")  # and without what later migrations made (migration 5's tables)
    db.execute("DROP TABLE tool_calls")
    db.execute("PRAGMA user_version = 2")  # as a release before documents left it
    db.commit()
    db.close()
    with Store() as s:  # migrated: the table is back (empty), the schema current
        assert attached.has_table(s._db())
        assert s._db().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s.get_conversation(conv.id).messages[0].attachments == []


def test_json_round_trip_rebuilds_the_same_prompt(store, report, tmp_path):
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "What colour are pears?", attachments=[_stored(report)])
    store.add_message(conv.id, "assistant", "Green.")
    original = store.get_conversation(conv.id)
    path = export_conversation(original, "json", tmp_path / "chat.json")
    copy = import_conversation(store, path)
    assert [m.attachments for m in copy.messages] == [m.attachments for m in original.messages]
    assert engine_messages(copy.messages, "") == engine_messages(original.messages, "")
    assert store.get_conversation(copy.id).messages[0].attachments == [_stored(report)]


def test_bad_attachments_in_an_import(store, tmp_path):
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "q")
    path = export_conversation(store.get_conversation(conv.id), "json", tmp_path / "chat.json")
    text = path.read_text().replace('"stats": null', '"stats": null, "attachments": [{"name": 3, "text": ""}]', 1)
    path.write_text(text)
    with pytest.raises(ChinwagError, match=r"^cannot import .*attachment 0\.name is not a str"):
        import_conversation(store, path)


def test_markdown_text_html_show_each_attachment(store, report):
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "What colour?", attachments=[_stored(report)])
    loaded = store.get_conversation(conv.id)
    md = to_markdown(loaded)
    assert "### Attachment: report.pdf (PDF," in md and "Pears are green." in md
    assert "Attachment: report.pdf" in "\n".join(to_text(loaded).splitlines())
    page = to_html(loaded)
    assert '<details class="attachment"><summary>📎 report.pdf (PDF,' in page and "Pears are green." in page
    printed = to_html(loaded, for_print=True)
    assert "<details" not in printed.split("<main>")[1] and "Attachment: report.pdf" in printed
