"""Tool rounds in their own tables (migration 5): a database from the release before it migrates with
nothing lost, and the store reads and writes the typed message (engine.types.ChatMessage).

tests/app/core/data/schema4.db was written by that release's Store (commit 5bc8bba, schema 4, tool
rounds inside each message's stats): chat A asks for 6 times 7 with a document; the reply makes two
calls (multiply, divide), each result saved with its server, arguments, outcome and time (the second
with the round limit's note), then the final answer. Chat B's only call was refused (its result saved
without run details) and has the server `files` off. Chat C's reply has hand-damaged stats
(`tool_calls` that are not calls).
"""

import json
import shutil
import sqlite3

import pytest

from app.core.migrations import MIGRATIONS, SCHEMA_VERSION
from app.core.settings import chat_messages, engine_messages, tools_off
from app.core.store import Store, StoredToolResult
from app.transcripts.export import to_json, to_markdown
from app.transcripts.json_import import import_conversation
from engine.errors import ChinwagError
from engine.types import ChatMessage, Role, ToolCall
from tests.app.core.old_release import DATA, raw_copy, store_from

FIXTURE = DATA / "schema4.db"
A = "876796ef-71b6-42a0-9423-5e7d1e1c22ec"
B = "e90783f4-923c-419e-bedd-06d0c760174b"
C = "14acafac-270c-479b-9d25-662ba8c60729"
MULTIPLY = ToolCall("call_1", "multiply", '{"a": 6, "b": 7}')
DIVIDE = ToolCall("call_2", "divide", '{"a": 1, "b": 0}')


@pytest.fixture
def old_store(chinwag_home):
    yield from store_from(FIXTURE, chinwag_home)


def test_the_fixture_is_the_previous_release(tmp_path):
    raw = raw_copy(FIXTURE, tmp_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 4
    assert "tool_calls" in raw.execute("SELECT stats FROM messages WHERE id=2").fetchone()[0]
    raw.close()


def test_tool_rounds_leave_stats_for_their_own_rows(old_store, chinwag_home):
    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS) == 5
    raw.close()
    user, round_, multiply, divide, answer = old_store.get_conversation(A).messages
    assert round_.tool_calls == (MULTIPLY, DIVIDE)
    assert round_.stats == {
        "prompt_tokens": 120,
        "generated_tokens": 30,
        "decode_tps": 40.5,
        "finish_reason": "tool_calls",
    }
    assert multiply.role == Role.TOOL and multiply.stats is None
    assert multiply.tool_result == StoredToolResult(
        "call_1", "multiply", "calc", MULTIPLY.arguments, False, True, 0.012
    )
    assert divide.tool_result == StoredToolResult(
        "call_2", "divide", "calc", DIVIDE.arguments, True, True, 0.003, "Stopped after 1 round of tool calls."
    )
    assert answer.tool_calls == () and answer.stats is not None and answer.stats["generated_tokens"] == 14
    (document,) = user.attachments
    assert (document.name, document.text) == ("notes.txt", "hello world")


def test_the_migrated_chat_reaches_the_engine_as_it_did(old_store):
    conv = old_store.get_conversation(A)
    sent = chat_messages(conv.messages, "Use the calculator.")
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert sent[1].content.startswith('<document name="notes.txt">\nhello world\n</document>')
    assert sent[2] == ChatMessage(Role.ASSISTANT, "Let me compute.", (MULTIPLY, DIVIDE))
    assert sent[3] == ChatMessage(Role.TOOL, "42", (), "call_1", "multiply")
    assert engine_messages(conv.messages, "")[1]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "multiply", "arguments": MULTIPLY.arguments},
    }


def test_a_refused_call_and_damaged_stats_keep_what_they_had(old_store):
    _, round_, refused, _ = old_store.get_conversation(B).messages
    assert round_.tool_calls == (ToolCall("x", "rm", "{}"),) and round_.stats == {"generated_tokens": 5}
    assert refused.tool_result == StoredToolResult("x", "rm") and refused.stats is None
    assert tools_off(old_store, B) == {"files"}
    _, odd = old_store.get_conversation(C).messages
    assert odd.tool_calls == () and odd.stats == {"tool_calls": "garbage", "generated_tokens": 2}
    assert [m.role for m in chat_messages([odd], "")] == ["assistant"]


def test_a_chat_with_tool_rounds_is_exported_imported_and_deleted_whole(old_store, tmp_path):
    export = tmp_path / "a.json"
    export.write_text(to_json(old_store.get_conversation(A)), encoding="utf-8")
    copy = import_conversation(old_store, export)
    before, after = old_store.get_conversation(A).messages, old_store.get_conversation(copy.id).messages
    assert [(m.role, m.content, m.stats, m.tool_calls, m.tool_result) for m in after] == [
        (m.role, m.content, m.stats, m.tool_calls, m.tool_result) for m in before
    ]
    markdown = to_markdown(old_store.get_conversation(A))
    assert "called multiply, divide" in markdown and "divide on calc · error" in markdown
    old_store.delete_conversation(A)
    old_store.delete_conversation(copy.id)
    left = old_store.get_conversation(B).messages
    calls = {r[0] for r in old_store._db().execute("SELECT message_id FROM tool_calls")}
    results = {r[0] for r in old_store._db().execute("SELECT message_id FROM tool_results")}
    assert calls == {m.id for m in left if m.tool_calls} and results == {m.id for m in left if m.tool_result}


def test_an_export_from_before_schema_5_imports_its_tool_rounds(store, tmp_path):
    """Older exports kept the round in stats, as the store did."""
    conv = store.create_conversation()
    store.append(conv.id, ChatMessage(Role.USER, "6*7?"))
    store.append(conv.id, ChatMessage(Role.ASSISTANT, "", (MULTIPLY,)), stats={"generated_tokens": 3})
    store.append(
        conv.id,
        ChatMessage(Role.TOOL, "42", (), "call_1", "multiply"),
        tool_result=StoredToolResult("call_1", "multiply", "calc"),
    )
    data = json.loads(to_json(store.get_conversation(conv.id)))
    for m in data["messages"] + data.get("tree", []):
        moved = {k: m.pop(k) for k in ("tool_calls", "tool_call_id", "name") if k in m}
        moved.update(m.pop("tool", {}))
        if moved:
            m["stats"] = {**(m["stats"] or {}), **moved}
    assert '"server": "calc"' in json.dumps(data)
    export = tmp_path / "old.json"
    export.write_text(json.dumps(data), encoding="utf-8")
    _, round_, result = import_conversation(store, export).messages
    assert round_.tool_calls == (MULTIPLY,) and round_.stats == {"generated_tokens": 3}
    assert result.tool_result == StoredToolResult("call_1", "multiply", "calc") and result.stats is None


def test_a_typed_message_round_trips(store):
    conv = store.create_conversation()
    asked = ChatMessage(Role.USER, "6*7?")
    called = ChatMessage(Role.ASSISTANT, "", (MULTIPLY,))
    answered = ChatMessage(Role.TOOL, "42", (), "call_1", "multiply")
    for message in (asked, called, answered):
        store.append(conv.id, message)
    run = StoredToolResult("call_2", "divide", "calc", DIVIDE.arguments, True, True, 0.5)
    store.append(conv.id, ChatMessage(Role.TOOL, "error", (), "call_2", "divide"), tool_result=run)
    shown = store.get_conversation(conv.id).messages
    assert [m.chat_message() for m in shown] == [
        asked,
        called,
        answered,
        ChatMessage(Role.TOOL, "error", (), "call_2", "divide"),
    ]
    assert shown[3].tool_result == run and store.get_message(shown[1].id).tool_calls == (MULTIPLY,)


def test_a_round_passed_in_stats_is_kept_out_of_them(store):
    """The callers that save a round as releases before schema 5 did (stats with tool_calls) still work."""
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "6*7?")
    reply = store.add_message(conv.id, "assistant", "", status="streaming")
    store.update_message(
        reply.id, content="…", status="complete", stats={"generated_tokens": 4, "tool_calls": [MULTIPLY.to_openai()]}
    )
    result = store.add_message(
        conv.id, "tool", "42", stats={"tool_call_id": "call_1", "name": "multiply", "seconds": 1}
    )
    store.update_message(
        result.id, stats={"tool_call_id": "call_1", "name": "multiply", "seconds": 1, "note": "Stopped."}
    )
    _, round_, saved = store.get_conversation(conv.id).messages
    assert round_.tool_calls == (MULTIPLY,) and round_.stats == {"generated_tokens": 4}
    assert (
        saved.tool_result == StoredToolResult("call_1", "multiply", seconds=1.0, note="Stopped.")
        and saved.stats is None
    )
    store.update_message(round_.id, stats={"generated_tokens": 5, "tool_calls": []})  # a later update keeps the calls
    assert store.get_message(round_.id).tool_calls == (MULTIPLY,)


def test_a_message_with_an_unknown_role_says_which(store):
    conv = store.create_conversation()
    odd = store.add_message(conv.id, "narrator", "Meanwhile…")
    with pytest.raises(ChinwagError, match=f"message {odd.id} has an unknown role 'narrator'"):
        odd.chat_message()


def test_an_old_database_that_cannot_be_migrated_still_reads_its_rounds(chinwag_home, monkeypatch):
    from app.core import store_open

    shutil.copyfile(FIXTURE, chinwag_home / "chinwag.db")
    monkeypatch.setattr(store_open, "writable", lambda path: False)  # as a 0444 file for a user who is not root
    with Store() as store:
        assert store.read_only and "cannot be written" in store.notice
        _, round_, multiply, _, _ = store.get_conversation(A).messages
        assert round_.tool_calls == (MULTIPLY, DIVIDE) and "tool_calls" not in (round_.stats or {})
        assert multiply.tool_result == StoredToolResult(
            "call_1", "multiply", "calc", MULTIPLY.arguments, False, True, 0.012
        )
    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 4  # untouched
    raw.close()


def test_a_wrong_tool_round_in_an_export_is_refused_in_one_line(store, tmp_path):
    conv = store.create_conversation()
    store.append(conv.id, ChatMessage(Role.USER, "6*7?"))
    store.append(conv.id, ChatMessage(Role.ASSISTANT, "", (MULTIPLY,)))
    store.append(
        conv.id,
        ChatMessage(Role.TOOL, "42", (), "call_1", "multiply"),
        tool_result=StoredToolResult("call_1", "multiply", seconds=0.5),
    )
    good = to_json(store.get_conversation(conv.id))
    for old, new, message in [
        (
            '"name": "multiply",\n            "arguments"',
            '"name": "",\n            "arguments"',
            r"messages\[1\].tool_calls\[0\] has no function name",
        ),
        ('"seconds": 0.5', '"seconds": "soon"', r"messages\[2\].tool.seconds 'soon' is not what a tool run records"),
    ]:
        assert old in good, old
        bad = tmp_path / "bad.json"
        bad.write_text(good.replace(old, new, 1), encoding="utf-8")
        with pytest.raises(ChinwagError, match=f"cannot import .*bad.json: {message}$"):
            import_conversation(store, bad)
    assert len(store.list_conversations()) == 1
