"""The tool calls in a reply, read with mlx-lm's parser for the model's family.

mlx-lm's TokenizerWrapper knows the family's start and end markers (`<tool_call>` … `</tool_call>`
for Qwen/Hermes, `[TOOL_CALLS]` for Mistral, …) and a parser for the text between them.
"""

import json
import uuid
from collections.abc import Sequence
from typing import Any

from engine.types import ToolCall


def _blocks(text: str, start: str, end: str) -> list[str]:
    blocks, at = [], 0
    while (found := text.find(start, at)) >= 0:
        stop = text.find(end, found + len(start)) if end else -1
        if stop < 0:  # an unclosed block (or a format without an end marker) runs to the end
            blocks.append(text[found + len(start) :])
            break
        blocks.append(text[found + len(start) : stop])
        at = stop + len(end)
    return blocks


def outside_calls(tokenizer: Any, text: str) -> str:
    """`text` without its tool-call blocks (markers included), stripped."""
    start, end = getattr(tokenizer, "tool_call_start", None), getattr(tokenizer, "tool_call_end", None)
    if not start:
        return text.strip()
    out, at = [], 0
    while (found := text.find(start, at)) >= 0:
        out.append(text[at:found])
        stop = text.find(end, found + len(start)) if end else -1
        if stop < 0 or not end:
            at = len(text)
            break
        at = stop + len(end)
    out.append(text[at:])
    return "".join(out).strip()


def parse_tool_calls(tokenizer: Any, text: str, tools: Sequence[dict[str, Any]]) -> tuple[ToolCall, ...]:
    """The ToolCalls in `text` (a model's whole reply); a call that cannot be parsed is left out."""
    start, end = getattr(tokenizer, "tool_call_start", None), getattr(tokenizer, "tool_call_end", None)
    parser = getattr(tokenizer, "tool_parser", None)
    if not start or parser is None or start not in text:
        return ()
    calls = []
    for block in _blocks(text, start, end or ""):
        try:
            parsed = parser(block, list(tools))
        except (ValueError, KeyError, TypeError, AttributeError):  # json.JSONDecodeError is a ValueError
            continue
        for call in parsed if isinstance(parsed, list) else [parsed]:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                continue
            args = call.get("arguments", {})
            if isinstance(args, str):  # some parsers return the JSON text
                try:
                    args = json.loads(args)
                except ValueError:
                    continue
            given = call.get("id")
            call_id = given if isinstance(given, str) and given else f"call_{uuid.uuid4().hex[:12]}"
            calls.append(ToolCall(call_id, call["name"], json.dumps(args, ensure_ascii=False)))
    return tuple(calls)
