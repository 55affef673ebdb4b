"""Anthropic Messages request bodies -> the GenerationRequest the service runs, every field checked.

The same checks as the OpenAI side (requests.py: numbers in GenerationParams' ranges, stop
sequences, tool definitions, tool-call arguments); Anthropic's content blocks become the
engine's messages: `system` first, `tool_use` blocks an assistant message's tool calls, each
`tool_result` block a `tool` message, text blocks their message's text.
"""

import json
from dataclasses import replace
from typing import Any

from app.server.formats import anthropic_format, anthropic_tool_choice, one_format
from app.server.requests import (
    GenerationRequest,
    bad,
    function_tool,
    message_list,
    number,
    stop_sequences,
    tool_arguments,
    tool_count,
)
from engine.types import ChatMessage, GenerationParams, Role, ToolCall

# Fields that would change the answer if ignored: refused unless they hold their neutral value.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "mcp_servers": (None, []),
    "container": (None,),
}
BLOCK_JOIN = "\n\n"  # between a user's (or the system prompt's) text blocks


def _text(block: Any, at: str) -> str:
    """A text block's text (cache_control and citations are accepted and left aside)."""
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        raise bad(at, f"only text blocks ({{'type': 'text', 'text': '...'}}) are supported here, got {kind!r:.40}")
    text: str = block["text"]
    return text


def _text_blocks(content: Any, where: str) -> str:
    """A string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(where, f"must be a string or a list of text blocks, got {type(content).__name__}")
    return BLOCK_JOIN.join(_text(block, f"{where}[{i}]") for i, block in enumerate(content))


def _user(content: Any, where: str) -> list[ChatMessage]:
    """A user message: a `tool` message per tool_result block, then one user message of its text."""
    if isinstance(content, str):
        return [ChatMessage(Role.USER, content)]
    if not isinstance(content, list):
        raise bad(f"{where}.content", f"must be a string or a list of content blocks, got {type(content).__name__}")
    out: list[ChatMessage] = []
    texts = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise bad(f"{at}.tool_use_id", "must be a string")
            result = _text_blocks(block.get("content", ""), f"{at}.content")
            if not isinstance(block.get("is_error", False), bool):
                raise bad(f"{at}.is_error", f"must be true or false, got {block['is_error']!r:.40}")
            if block.get("is_error"):
                result = f"Error: {result}"
            out.append(ChatMessage(Role.TOOL, result, tool_call_id=block["tool_use_id"]))
        elif kind == "text":
            texts.append(_text(block, at))
        else:
            raise bad(at, f"only text and tool_result blocks are supported in a user message, got {kind!r:.40}")
    if texts or not out:
        out.append(ChatMessage(Role.USER, BLOCK_JOIN.join(texts)))
    return out


def _assistant(content: Any, where: str) -> ChatMessage:
    """An assistant message: its text, and its tool_use blocks as tool calls (as the service writes them back)."""
    if isinstance(content, str):
        return ChatMessage(Role.ASSISTANT, content)
    if not isinstance(content, list):
        raise bad(f"{where}.content", f"must be a string or a list of content blocks, got {type(content).__name__}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str) or not block["name"]:
                raise bad(at, "must be {'type': 'tool_use', 'id': str, 'name': str, 'input': {...}}")
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            tool_arguments(arguments, f"{at}.input")  # an object, as the tool's schema has it
            calls.append(ToolCall(block["id"], block["name"], arguments))
        else:
            raise bad(at, f"only text and tool_use blocks are supported in an assistant message, got {kind!r:.40}")
    return ChatMessage(Role.ASSISTANT, "".join(texts), tuple(calls))


def _messages(body: dict[str, Any]) -> tuple[ChatMessage, ...]:
    messages = message_list(body, "a conversation")
    system = "" if body.get("system") is None else _text_blocks(body["system"], "system")
    clean = [ChatMessage(Role.SYSTEM, system)] if system else []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, f"must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role == "user":
            clean.extend(_user(m.get("content"), where))
        elif role == "assistant":
            clean.append(_assistant(m.get("content"), where))
        else:
            raise bad(f"{where}.role", f"must be user or assistant, got {role!r:.40}")
    if clean[-1].role == Role.ASSISTANT and clean[-1].tool_calls:
        raise bad("messages", "ends with tool_use blocks: send their tool_result blocks in a user message")
    if clean[-1].role == Role.ASSISTANT and not clean[-1].content:
        raise bad("messages", "ends with an empty assistant message")
    return tuple(clean)


def _tools(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Anthropic's tool definitions as OpenAI function tools (what the chat templates read)."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if tools is None:
        return ()
    clean = []
    for i, tool in enumerate(tool_count(tools)):
        if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise bad(
                f"tools[{i}]",
                f"only client tools ({{'name', 'description', 'input_schema'}}) are supported, got {kind!r:.40}",
            )
        if not isinstance(tool.get("input_schema"), dict):
            raise bad(f"tools[{i}].input_schema", "is required: a JSON Schema object")
        clean.append(function_tool(tool, f"tools[{i}]", "input_schema"))
    return () if kind == "none" else tuple(clean)  # checked all the same


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in UNSUPPORTED.items():
        if body.get(name) not in neutral:
            raise bad(name, f"Chinwag cannot honour {name} (it would change the answer); leave it out")
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        raise bad(
            "thinking", "Chinwag cannot honour extended thinking; a reasoning model writes its thinking in the text"
        )


def _params(body: dict[str, Any], need_max_tokens: bool) -> GenerationParams:
    changes: dict[str, Any] = {}
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            changes[key] = number(body, key)
    if body.get("max_tokens") is not None:
        changes["max_tokens"] = number(body, "max_tokens")
    elif need_max_tokens:
        raise bad("max_tokens", "is required: the longest reply, in tokens")
    return replace(GenerationParams(), **changes)


def messages_request(body: dict[str, Any], pin_header: str = "", counting: bool = False) -> GenerationRequest:
    """A /v1/messages body (or /v1/messages/count_tokens's, `counting`: no max_tokens needed), checked."""
    _refuse_unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad("model", f"must be a string, got {type(model).__name__}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"must be true or false, got {stream!r:.40}")
    messages = _messages(body)
    tools = _tools(body)
    # A last assistant message is a prefill: the reply writes on from its end.
    prefill = messages[-1].role == Role.ASSISTANT
    fmt = one_format(anthropic_format(body), anthropic_tool_choice(body.get("tool_choice"), tools), "tool_choice")
    if fmt is not None and prefill:
        raise bad(
            "messages", "ends with an assistant message (a prefill), which a JSON output or forced call cannot continue"
        )
    params = replace(_params(body, not counting), tools=tools, continue_reply=prefill, response_format=fmt)
    return GenerationRequest(
        messages=messages,
        params=params,
        model=model,
        stream=stream,
        stop=stop_sequences(body.get("stop_sequences"), "stop_sequences"),
        pin=pin_header[:200],
        tools=bool(tools),
    )
