"""Message status, finish reason, engine state and model status are StrEnums whose values are
the strings the database, JSON exports and `chinwag ... --json` have always held."""

import asyncio
import json

from app.core.store import STATUSES, MessageStatus
from engine import Engine, GenerationParams
from engine.models import registry
from engine.types import EngineStatus, FinishReason, ModelInfo, ModelStatus, TurnStats


def test_the_values_are_the_stored_strings():
    assert [s.value for s in MessageStatus] == ["complete", "streaming", "stopped", "failed"] == list(STATUSES)
    assert [s.value for s in FinishReason] == ["stop", "length", "context", "cancelled", "error", "tool_calls"]
    assert [s.value for s in EngineStatus] == ["starting", "idle", "loading", "ready", "generating", "error"]
    assert [s.value for s in ModelStatus] == ["ready", "needs-import", "unusable"]
    info = ModelInfo("m", "M", "/m", status=ModelStatus.NEEDS_IMPORT)
    assert json.loads(json.dumps(info.to_json()))["status"] == "needs-import"


def test_the_store_keeps_plain_strings(store):
    conv = store.create_conversation()
    msg = store.add_message(conv.id, "assistant", "Hi", status=MessageStatus.STREAMING)
    store.update_message(msg.id, status=MessageStatus.STOPPED)
    row = store._db().execute("SELECT status FROM messages WHERE id=?", (msg.id,)).fetchone()
    assert type(row[0]) is str and row[0] == "stopped"
    assert store.get_conversation(conv.id).messages[0].status == MessageStatus.STOPPED
    assert store.add_message(conv.id, "user", "Hello").status == "complete"


def test_the_engine_and_registry_produce_the_enums(tiny_model_path):
    async def go():
        engine = Engine()
        try:
            assert engine.state.state is EngineStatus.IDLE
            await engine.load_model(str(tiny_model_path))
            assert engine.state.state is EngineStatus.READY
            events = [
                ev
                async for ev in engine.chat(
                    "c", [{"role": "user", "content": "Hi"}], GenerationParams(temperature=0.0, max_tokens=3)
                )
            ]
            return events[-1]
        finally:
            await engine.close()

    stats = asyncio.run(go())
    assert isinstance(stats, TurnStats) and type(stats.finish_reason) is FinishReason
    assert stats.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    statuses = {type(m.status) for m in registry.list_models()}
    assert statuses == {ModelStatus}


def test_message_roles_and_model_sources_are_the_stored_strings(store):
    from app.core.store import MessageRole
    from engine.types import ModelSource

    assert [r.value for r in MessageRole] == ["system", "user", "assistant", "tool"]
    assert [s.value for s in ModelSource] == ["starter", "imported", "hf-cache", "folder", "server"]
    conv = store.create_conversation()
    msg = store.add_message(conv.id, MessageRole.USER, "Hello")
    row = store._db().execute("SELECT role FROM messages WHERE id=?", (msg.id,)).fetchone()
    assert type(row[0]) is str and row[0] == "user"
    assert store.get_conversation(conv.id).title == "Hello"  # the first user message still names the chat
    info = ModelInfo("m", "M", "/m", source=ModelSource.HF_CACHE)
    assert json.loads(json.dumps(info.to_json()))["source"] == "hf-cache"
