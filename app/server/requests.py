"""OpenAI request bodies -> what the engine needs, every field checked (a 400 says which one)."""

import json
from dataclasses import dataclass, field, replace
from typing import Any

from app.server.errors import ApiError
from app.server.formats import one_format, openai_format, openai_tool_choice
from app.server.limits import MAX_MESSAGES, MAX_STOP_SEQUENCES, MAX_TOOLS
from engine.errors import ChinwagError
from engine.types import GenerationParams, param_specs

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
# Fields that would change the answer if ignored: refused unless they hold their neutral value.
UNSUPPORTED: dict[str, tuple] = {
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


@dataclass(frozen=True)
class GenerationRequest:
    """One chat or completion request, checked."""

    messages: list
    params: GenerationParams
    model: str = ""
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    pin: str = ""  # the `user` field or X-Chinwag-Conversation header: a conversation the client names
    # Set when `tools` were given: the reply is sent whole at its end, its calls as `tool_calls`.
    tools: bool = False
    extra: dict = field(default_factory=dict)


def bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in UNSUPPORTED.items():
        value = body.get(name)
        if not any(value == n and type(value) is type(n) for n in neutral):  # True == 1, but n=true is no count
            raise bad(name, f"Chinwag cannot honour {name}={value!r:.40} (it would change the answer); leave it out")


def number(body: dict, name: str, key: str | None = None) -> Any:
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


def _params(body: dict) -> GenerationParams:
    params = GenerationParams()
    changes: dict = {}
    for key in ("temperature", "top_p", "seed"):
        if body.get(key) is not None:
            changes[key] = number(body, key)
    for key in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are sent
        if body.get(key) is not None:
            changes["max_tokens"] = number(body, "max_tokens", key)
            break
    return replace(params, **changes)


def _tools(body: dict) -> tuple:
    """The tool definitions (OpenAI's function tools), checked; () without tools or with tool_choice "none"."""
    tools = body.get("tools")
    if tools is None or body.get("tool_choice") == "none":
        return ()
    tool_count(tools)
    clean = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise bad(f"tools[{i}]", "must be {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
        clean.append(function_tool(fn, f"tools[{i}].function", "parameters"))
    return tuple(clean)


def tool_count(tools: Any, param: str = "tools") -> list:
    if not isinstance(tools, list):
        raise bad(param, f"must be a list of tool definitions, got {type(tools).__name__}")
    if len(tools) > MAX_TOOLS:
        raise bad(param, f"holds {len(tools)} tools, more than the limit of {MAX_TOOLS}")
    return tools


def function_tool(fn: dict, where: str, schema: str) -> dict:
    """One tool definition, checked, in the OpenAI function form the chat templates read:
    `fn` holds name, description and its JSON Schema under `schema` (parameters, or input_schema)."""
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise bad(f"{where}.name", "must be a non-empty string")
    if not isinstance(fn.get("description", ""), str):
        raise bad(f"{where}.description", "must be a string")
    if not isinstance(fn.get(schema, {}), dict):
        raise bad(f"{where}.{schema}", "must be a JSON Schema object")
    keep = {k: fn[k] for k in ("name", "description") if k in fn}
    if schema in fn:
        keep["parameters"] = fn[schema]
    return {"type": "function", "function": keep}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def tool_arguments(text: str, where: str) -> dict:
    """A tool call's arguments: JSON text of an object ("" is {}); NaN, Infinity or a list are refused."""
    try:
        value = json.loads(text or "{}", parse_constant=_no_constant)
    except ValueError:
        raise bad(where, f"must be the JSON text of an object, got {text!r:.40}") from None
    if not isinstance(value, dict):
        raise bad(where, f"must be the JSON text of an object, got {type(value).__name__} {text!r:.40}")
    return value


def _tool_calls(calls: Any, where: str) -> list:
    """An assistant message's tool_calls as the client sent them back: [{'id', 'name', 'arguments'}]."""
    if not isinstance(calls, list):
        raise bad(where, f"must be a list of tool calls, got {type(calls).__name__}")
    clean = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise bad(
                f"{where}[{i}]", "must be {'id', 'type': 'function', 'function': {'name': str, 'arguments': str}}"
            )
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise bad(f"{where}[{i}].id", "must be a string")
        tool_arguments(fn["arguments"], f"{where}[{i}].function.arguments")
        clean.append({"id": call_id, "name": fn["name"], "arguments": fn["arguments"]})
    return clean


def stop_sequences(stop: Any, param: str = "stop") -> tuple[str, ...]:
    """A string or a list of strings, each non-empty, at most MAX_STOP_SEQUENCES; () for None."""
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad(param, "must be a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise bad(param, f"at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}")
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


def message_list(body: dict, what: str = "a chat") -> list:
    """The body's `messages`: a list of 1 to MAX_MESSAGES entries (each checked by its wire's parser)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad("messages", "is required: a list of {'role', 'content'} objects")
    if not messages:
        raise bad("messages", f"is empty: {what} needs at least one message")
    if len(messages) > MAX_MESSAGES:
        raise bad("messages", f"holds {len(messages)} messages, more than the limit of {MAX_MESSAGES}")
    return messages


def _messages(body: dict) -> list:
    messages = message_list(body)
    clean = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, f"must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role", f"must be one of system, developer, user, assistant, tool; got {role!r:.40}")
        message: dict[str, Any] = {"role": ROLES[role], "content": _content(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):  # the service writes the calls back as the model made them
            message["tool_calls"] = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
        if role == "tool" and isinstance(m.get("tool_call_id"), str):  # which call it answers, as the window keeps it
            message["tool_call_id"] = m["tool_call_id"]
        clean.append(message)
    if all(m["role"] == "system" for m in clean):
        raise bad("messages", "has no user message")
    return clean


def _common(body: dict, messages: list, pin_header: str) -> GenerationRequest:
    _refuse_unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise bad("model", f"must be a string, got {type(model).__name__}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", f"must be true or false, got {stream!r:.40}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise bad("stream_options", "must be an object like {'include_usage': true}")
    user = body.get("user") or ""
    if not isinstance(user, str):
        raise bad("user", f"must be a string, got {type(user).__name__}")
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


def chat_request(body: dict, pin_header: str = "") -> GenerationRequest:
    return _common(body, _messages(body), pin_header)


def completion_request(body: dict, pin_header: str = "") -> GenerationRequest:
    """A plain prompt, sent to the model as one user message (through its chat template)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise bad("prompt", "must be a non-empty string (one prompt per request)")
    if body.get("tools"):
        raise bad("tools", "tools are for /v1/chat/completions, not plain completions")
    return _common(body, [{"role": "user", "content": prompt}], pin_header)
