"""OpenAI request bodies -> what the engine needs, every field checked (a 400 says which one)."""

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from app.server.errors import ApiError
from app.server.formats import one_format, openai_format, openai_tool_choice
from app.server.limits import MAX_MESSAGES, MAX_STOP_CHARS, MAX_STOP_SEQUENCES, MAX_TOOLS
from engine.errors import ChinwagError
from engine.types import ChatMessage, GenerationParams, Role, ToolCall, param_specs

ROLES = {
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
    "user": Role.USER,
    "assistant": Role.ASSISTANT,
    "tool": Role.TOOL,
}
# Fields that would change the answer if ignored: refused unless they hold their neutral value.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "logit_bias": (None, {}),
    "functions": (None, []),  # the old name of `tools`: clients that still send it get told
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
}
_SPECS = {spec.name: spec for spec in param_specs()}
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class GenerationRequest:
    """One chat or completion request, checked: its messages typed as every layer passes them."""

    messages: tuple[ChatMessage, ...]
    params: GenerationParams
    model: str = ""
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    pin: str = ""  # the `user` field or X-Chinwag-Conversation header: a conversation the client names
    # Set when `tools` were given: the reply is sent whole at its end, its calls as `tool_calls`.
    tools: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in UNSUPPORTED.items():
        value = body.get(name)
        if not any(value == n and type(value) is type(n) for n in neutral):  # True == 1, but n=true is no count
            raise bad(name, f"Chinwag cannot honour {name}={value!r:.40} (it would change the answer); leave it out")


def number(body: dict[str, Any], name: str, key: str | None = None) -> Any:
    """body[key] as GenerationParams' `name` (a JSON number in its range), or a 400 naming `key`."""
    spec = _SPECS[name]
    key = key or name
    value = body[key]
    if isinstance(value, str):  # JSON numbers only: "8" is text (the CLI's converter would read it)
        raise ApiError(400, f"{key} must be {spec.describe()} (a JSON number, not text), got {value!r:.40}", param=key)
    try:
        return spec.convert(value)
    except ChinwagError as e:
        raise ApiError(400, str(e).replace(name, key, 1), param=key) from None


def _params(body: dict[str, Any]) -> GenerationParams:
    params = GenerationParams()
    changes: dict[str, Any] = {}
    for key in ("temperature", "top_p", "seed"):
        if body.get(key) is not None:
            changes[key] = number(body, key)
    for key in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are sent
        if body.get(key) is not None:
            changes["max_tokens"] = number(body, "max_tokens", key)
            break
    return replace(params, **changes)


def _tools(body: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The tool definitions (OpenAI's function tools), checked; () without tools or with tool_choice "none"."""
    tools = body.get("tools")
    if tools is None:
        return ()
    tool_count(tools)
    clean = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise bad(f"tools[{i}]", "must be {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
        clean.append(function_tool(fn, f"tools[{i}].function", "parameters"))
    return () if body.get("tool_choice") == "none" else tuple(clean)  # checked all the same


def tool_count(tools: Any, param: str = "tools") -> list[Any]:
    if not isinstance(tools, list):
        raise bad(param, f"must be a list of tool definitions, got {type(tools).__name__}")
    if len(tools) > MAX_TOOLS:
        raise bad(param, f"holds {len(tools)} tools, more than the limit of {MAX_TOOLS}")
    return tools


def function_tool(fn: dict[str, Any], where: str, schema: str) -> dict[str, Any]:
    """One tool definition, checked, in the OpenAI function form the chat templates read:
    `fn` holds name, description and its JSON Schema under `schema` (parameters, or input_schema)."""
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad(f"{where}.name", "must be a non-empty string")
    if not isinstance(fn.get("description", ""), str):
        raise bad(f"{where}.description", "must be a string")
    if not isinstance(fn.get(schema, {}), dict):
        raise bad(f"{where}.{schema}", "must be a JSON Schema object")
    keep: dict[str, Any] = {k: fn[k] for k in ("name", "description") if k in fn}
    if schema in fn:
        keep["parameters"] = fn[schema]
    return {"type": "function", "function": keep}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def tool_arguments(text: str, where: str) -> dict[str, Any]:
    """A tool call's arguments: JSON text of an object ("" is {}); NaN, Infinity or a list are refused."""
    try:
        value = json.loads(text or "{}", parse_constant=_no_constant)
    except ValueError:
        raise bad(where, f"must be the JSON text of an object, got {text!r:.40}") from None
    if not isinstance(value, dict):
        raise bad(where, f"must be the JSON text of an object, got {type(value).__name__} {text!r:.40}")
    return value


def _named(fn: dict[str, Any]) -> bool:
    return isinstance(fn.get("name"), str) and bool(fn["name"])


def _tool_calls(calls: Any, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's tool_calls as the client sent them back (arguments as the text it sent)."""
    if not isinstance(calls, list):
        raise bad(where, f"must be a list of tool calls, got {type(calls).__name__}")
    clean = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str) or not _named(fn):
            raise bad(
                f"{where}[{i}]", "must be {'id', 'type': 'function', 'function': {'name': str, 'arguments': str}}"
            )
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise bad(f"{where}[{i}].id", "must be a string")
        tool_arguments(fn["arguments"], f"{where}[{i}].function.arguments")
        clean.append(ToolCall(call_id, fn["name"], fn["arguments"]))
    return tuple(clean)


def stop_sequences(stop: Any, param: str = "stop") -> tuple[str, ...]:
    """A string or a list of strings, each non-empty, at most MAX_STOP_SEQUENCES; () for None."""
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad(param, "must be a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise bad(param, f"at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}")
    longest = max(len(s) for s in stops)
    if longest > MAX_STOP_CHARS:
        raise bad(param, f"a stop sequence holds {longest} characters, more than the limit of {MAX_STOP_CHARS}")
    return tuple(stops)


def _content(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad(f"{where}.content[{i}]", "only text parts ({'type': 'text', 'text': '...'}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"{where}.content", f"must be a string or a list of text parts, got {type(content).__name__}")


def message_list(body: dict[str, Any], what: str = "a chat") -> list[Any]:
    """The body's `messages`: a list of 1 to MAX_MESSAGES entries (each checked by its wire's parser)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad("messages", "is required: a list of {'role', 'content'} objects")
    if not messages:
        raise bad("messages", f"is empty: {what} needs at least one message")
    if len(messages) > MAX_MESSAGES:
        raise bad("messages", f"holds {len(messages)} messages, more than the limit of {MAX_MESSAGES}")
    return messages


def _messages(body: dict[str, Any]) -> tuple[ChatMessage, ...]:
    messages = message_list(body)
    clean: list[ChatMessage] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, f"must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role", f"must be one of system, developer, user, assistant, tool; got {role!r:.40}")
        calls: tuple[ToolCall, ...] = ()
        if role == "assistant" and m.get("tool_calls") is not None:  # written back as the model made them
            calls = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
        call_id = m.get("tool_call_id", "") if role == "tool" else ""  # which call it answers, as the window keeps it
        if not isinstance(call_id, str):
            raise bad(f"{where}.tool_call_id", f"must be a string, got {type(call_id).__name__}")
        content = _content(m.get("content"), where)
        clean.append(ChatMessage(ROLES[role], content, calls, call_id))
    if all(m.role == Role.SYSTEM for m in clean):
        raise bad("messages", "has no user message")
    return tuple(clean)


def _common(body: dict[str, Any], messages: tuple[ChatMessage, ...], pin_header: str) -> GenerationRequest:
    _refuse_unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad("model", f"must be a string, got {type(model).__name__}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"must be true or false, got {stream!r:.40}")
    options = body.get("stream_options")
    options = {} if options is None else options
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise bad("stream_options", "must be an object like {'include_usage': true}")
    user = body.get("user")
    user = "" if user is None else user
    if not isinstance(user, str):
        raise bad("user", f"must be a string, got {type(user).__name__}")
    if _SURROGATE.search(user):  # it names a conversation: "\ud800" and "\udc00" must not both become U+FFFD
        raise bad("user", "holds a lone surrogate (JSON's \\ud800 to \\udfff alone), which is no Unicode text")
    tools = _tools(body)
    fmt = one_format(openai_format(body), openai_tool_choice(body, tools), "tool_choice")
    return GenerationRequest(
        messages=messages,
        params=replace(_params(body), tools=tools, response_format=fmt),
        model=model,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        stop=stop_sequences(body.get("stop")),
        pin=(pin_header or user)[:200],
        tools=bool(tools),
    )


def chat_request(body: dict[str, Any], pin_header: str = "") -> GenerationRequest:
    return _common(body, _messages(body), pin_header)


def completion_request(body: dict[str, Any], pin_header: str = "") -> GenerationRequest:
    """A plain prompt, sent to the model as one user message (through its chat template)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad("prompt", "must be a non-empty string (one prompt per request)")
    if body.get("tools"):
        raise bad("tools", "tools are for /v1/chat/completions, not plain completions")
    return _common(body, (ChatMessage(Role.USER, prompt),), pin_header)
