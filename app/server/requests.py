"""OpenAI request bodies -> what the engine needs, every field checked (a 400 says which one)."""

import json
from dataclasses import dataclass, field, replace
from typing import Any

from app.server.errors import ApiError
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
    "tool_choice": (None, "none", "auto"),  # "required" or a named function would force a call
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


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def _refuse_unsupported(body: dict) -> None:
    for name, neutral in UNSUPPORTED.items():
        value = body.get(name)
        if not any(value == n and type(value) is type(n) for n in neutral):  # True == 1, but n=true is no count
            raise _bad(name, f"Chinwag cannot honour {name}={value!r:.40} (it would change the answer); leave it out")
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _bad("response_format", "only {'type': 'text'} is supported")


def _number(body: dict, name: str, key: str | None = None) -> Any:
    spec = _SPECS[name]
    key = key or name
    try:
        return spec.convert(body[key])
    except ChinwagError as e:
        raise ApiError(400, str(e).replace(name, key, 1), param=key) from None


def _params(body: dict) -> GenerationParams:
    params = GenerationParams()
    changes: dict = {}
    for key in ("temperature", "top_p", "seed"):
        if body.get(key) is not None:
            changes[key] = _number(body, key)
    for key in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are sent
        if body.get(key) is not None:
            changes["max_tokens"] = _number(body, "max_tokens", key)
            break
    return replace(params, **changes)


def _tools(body: dict) -> tuple:
    """The tool definitions (OpenAI's function tools), checked; () without tools or with tool_choice "none"."""
    tools = body.get("tools")
    if tools is None or body.get("tool_choice") == "none":
        return ()
    if not isinstance(tools, list):
        raise _bad("tools", f"must be a list of tool definitions, got {type(tools).__name__}")
    if len(tools) > MAX_TOOLS:
        raise _bad("tools", f"holds {len(tools)} tools, more than the limit of {MAX_TOOLS}")
    clean = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise _bad(f"tools[{i}]", "must be {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise _bad(f"tools[{i}].function.name", "must be a non-empty string")
        if not isinstance(fn.get("description", ""), str):
            raise _bad(f"tools[{i}].function.description", "must be a string")
        if not isinstance(fn.get("parameters", {}), dict):
            raise _bad(f"tools[{i}].function.parameters", "must be a JSON Schema object")
        keep = {k: fn[k] for k in ("name", "description", "parameters") if k in fn}
        clean.append({"type": "function", "function": keep})
    return tuple(clean)


def _tool_calls(calls: Any, where: str) -> list:
    """An assistant message's tool_calls as the client sent them back: [{'id', 'name', 'arguments'}]."""
    if not isinstance(calls, list):
        raise _bad(where, f"must be a list of tool calls, got {type(calls).__name__}")
    clean = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            raise _bad(
                f"{where}[{i}]", "must be {'id', 'type': 'function', 'function': {'name': str, 'arguments': str}}"
            )
        call_id = call.get("id", "")
        if not isinstance(call_id, str):
            raise _bad(f"{where}[{i}].id", "must be a string")
        try:
            json.loads(fn["arguments"] or "{}")
        except ValueError:
            raise _bad(f"{where}[{i}].function.arguments", "must be JSON text") from None
        clean.append({"id": call_id, "name": fn["name"], "arguments": fn["arguments"]})
    return clean


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise _bad("stop", "must be a non-empty string or a list of non-empty strings")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise _bad("stop", f"at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}")
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
                raise _bad(f"{where}.content[{i}]", "only text parts ({'type': 'text', 'text': '...'}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"{where}.content", f"must be a string or a list of text parts, got {type(content).__name__}")


def _messages(body: dict) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad("messages", "is required: a list of {'role', 'content'} objects")
    if not messages:
        raise _bad("messages", "is empty: a chat needs at least one message")
    if len(messages) > MAX_MESSAGES:
        raise _bad("messages", f"holds {len(messages)} messages, more than the limit of {MAX_MESSAGES}")
    clean = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, f"must be an object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"{where}.role", f"must be one of system, developer, user, assistant, tool; got {role!r:.40}")
        message: dict[str, Any] = {"role": ROLES[role], "content": _content(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):  # the service writes the calls back as the model made them
            message["tool_calls"] = _tool_calls(m["tool_calls"], f"{where}.tool_calls")
        clean.append(message)
    if all(m["role"] == "system" for m in clean):
        raise _bad("messages", "has no user message")
    return clean


def _common(body: dict, messages: list, pin_header: str) -> GenerationRequest:
    _refuse_unsupported(body)
    model = body.get("model", "")
    if not isinstance(model, str):
        raise _bad("model", f"must be a string, got {type(model).__name__}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", f"must be true or false, got {stream!r:.40}")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise _bad("stream_options", "must be an object like {'include_usage': true}")
    user = body.get("user") or ""
    if not isinstance(user, str):
        raise _bad("user", f"must be a string, got {type(user).__name__}")
    tools = _tools(body)
    return GenerationRequest(
        messages=messages,
        params=replace(_params(body), tools=tools),
        model=model,
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        stop=_stop(body),
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
        raise _bad("prompt", "must be a non-empty string (one prompt per request)")
    if body.get("tools"):
        raise _bad("tools", "tools are for /v1/chat/completions, not plain completions")
    return _common(body, [{"role": "user", "content": prompt}], pin_header)
