"""Tool rounds in the transcript, read from what is stored: a reply that made calls shown without the
call's markup (the blocks below it show the calls), and a stored `tool` message as the ToolRun its
block shows (app/gui/chat/tool_message.py)."""

import dataclasses

from app.core.store import StoredToolResult
from app.tools.client import ToolResult
from app.tools.loop import ToolRun
from engine.types import ToolCall

# Where the common families' tool calls begin (mlx_lm/tool_parsers): a reply's text is shown up to there.
CALL_MARKERS = (
    "<tool_call>",
    "<|tool_call>",
    "[TOOL_CALLS]",
    "<|tool_call_start|>",
    "<|tool_calls_section_begin|>",
    "<start_function_call>",
    "<minimax:tool_call>",
    "<longcat_tool_call>",
    "<|python_tag|>",
)


def visible_text(text: str) -> str:
    """A reply's text without the tool calls it ends with (what the model said before calling)."""
    cut = min((i for i in (text.find(m) for m in CALL_MARKERS) if i >= 0), default=len(text))
    return text[:cut].rstrip()


def run_from_stored(content: str, stats: object) -> ToolRun:
    """A `tool` message as the ToolRun its block shows: from the store (its StoredToolResult), or as a reply
    with tools saves it (app/tools/loop.py stored_stats)."""
    if isinstance(stats, StoredToolResult):
        stats = {k: v for k, v in dataclasses.asdict(stats).items() if v is not None}
    s = stats if isinstance(stats, dict) else {}
    call = ToolCall(str(s.get("tool_call_id", "")), str(s.get("name", "tool")), str(s.get("arguments", "{}")))
    result = ToolResult(content, bool(s.get("is_error")), float(s.get("seconds") or 0.0))
    return ToolRun(call, str(s.get("server", "")), result, bool(s.get("allowed", True)))


def note_of(stats: object) -> str:
    """The line under a call's block (the round limit, Stop), from the store or a reply's stats."""
    if isinstance(stats, StoredToolResult):
        return stats.note
    return str(stats.get("note", "")) if isinstance(stats, dict) else ""
