"""Tool rounds in the store and in exports: kept, exported, and imported back without running anything."""

import json

from app.chat.transcript import StoreTranscript
from app.core.store import MessageStatus, Store, StoredToolResult
from app.tools.client import ToolResult
from app.tools.loop import ToolRun
from app.transcripts.export import export_conversation, to_markdown
from app.transcripts.json_import import import_conversation
from engine.types import FinishReason, ToolCall, TurnStats
from tests.app.tools.test_mcp_client import _children
from tests.tools_servers.launch import stdio_entry

CALL = ToolCall("call_1", "add", '{"a": 2, "b": 3}')
RAW = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


def stats(**kw) -> TurnStats:
    base = dict(
        prompt_tokens=10, reused_tokens=0, prefilled_tokens=10, generated_tokens=5, ttft_s=0.1, decode_tps=10.0,
        prefill_tps=100.0, kv_capacity=64, kv_offset=15, kv_bytes=1000, context_limit=2048,
        finish_reason=FinishReason.STOP,
    )  # fmt: skip
    return TurnStats(**{**base, **kw})


def saved_chat() -> str:
    """A reply with one tool round, written as the turn driver (app/chat/turn.py) writes it."""
    with Store() as store:
        chat = StoreTranscript(store, "", "tiny")
        chat.user("What is 2 plus 3?")
        first = stats(finish_reason=FinishReason.TOOL_CALLS, tool_calls=(CALL,))
        chat.round(chat.begin(), RAW, first)
        chat.tool(ToolRun(CALL, "calc", ToolResult("5.0", False, 0.25), True))
        chat.end(chat.begin(), "It is 5.", MessageStatus.COMPLETE, stats())
        return chat.conv_id


def test_tool_rounds_are_stored_exported_and_imported(chinwag_home, tmp_path):
    conv_id = saved_chat()
    with Store() as store:
        conv = store.get_conversation(conv_id)
        roles = [m.role for m in conv.messages]
        assert roles == ["user", "assistant", "tool", "assistant"]
        call_msg, result = conv.messages[1], conv.messages[2]
        assert call_msg.content == RAW and call_msg.tool_calls[0].name == "add"
        assert result.content == "5.0"
        assert result.stats is None and result.tool_result == StoredToolResult(
            "call_1", "add", "calc", CALL.arguments, is_error=False, allowed=True, seconds=0.25
        )
        md = to_markdown(conv)
        assert "## Tool" in md and "add on calc · 0.2 s" in md and "called add" in md
        path = export_conversation(conv, "json", tmp_path / "chat.json")
        # An enabled MCP server is configured: importing must not start it or run anything.
        (chinwag_home / "mcp.json").write_text(json.dumps({"mcpServers": {"calc": stdio_entry("crash")}}))
        before = _children()
        imported = import_conversation(store, path)
        assert _children() == before
        again = store.get_conversation(imported.id)
        assert [(m.role, m.content, m.stats, m.tool_calls, m.tool_result) for m in again.messages] == [
            (m.role, m.content, m.stats, m.tool_calls, m.tool_result) for m in conv.messages
        ]
