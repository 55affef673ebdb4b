"""Structured output on either wire: OpenAI's `response_format` and forcing `tool_choice`, Anthropic's
`output_config.format` and `tool_choice` any/tool, as the engine's `ResponseFormat`, checked here
(engine/constraint.py) so a schema feature the mask cannot enforce is a 400 that names it."""

import json
from typing import Any

from app.server.errors import ApiError
from engine.constraint import UnsupportedSchema, check
from engine.types import OutputKind, ResponseFormat


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param=param)


def checked(fmt: ResponseFormat, tools: tuple[Any, ...], param: str) -> ResponseFormat:
    try:
        check(fmt, tools)
    except UnsupportedSchema as e:
        raise _bad(param, str(e)) from None
    return fmt


def _schema(schema: Any, param: str) -> str:
    if not isinstance(schema, (dict, bool)):
        raise _bad(param, f"must be a JSON Schema object, got {type(schema).__name__}")
    return json.dumps(schema)


def openai_format(body: dict[str, Any]) -> ResponseFormat | None:
    """`response_format`: text (None), json_object, or json_schema {'name', 'schema', 'strict'}."""
    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat(OutputKind.JSON_OBJECT)
    if kind != "json_schema":
        raise _bad("response_format", f"must be {{'type': 'text' | 'json_object' | 'json_schema'}}, got {fmt!r:.60}")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        raise _bad("response_format.json_schema", "is required: {'name': ..., 'schema': {...}}")
    name = spec.get("name", "")
    if not isinstance(name, str):
        raise _bad("response_format.json_schema.name", "must be a string")
    if "schema" not in spec:  # OpenAI's schema is optional: then any JSON object
        return ResponseFormat(OutputKind.JSON_OBJECT, name=name)
    schema = _schema(spec["schema"], "response_format.json_schema.schema")
    return checked(ResponseFormat(OutputKind.JSON_SCHEMA, schema, name), (), "response_format.json_schema.schema")


def _forced(names: tuple[str, ...], tools: tuple[Any, ...], param: str) -> ResponseFormat:
    if not tools:
        raise _bad(param, "forces a tool call, but no tools were given")
    known = {t["function"]["name"] for t in tools}
    for name in names:
        if name not in known:
            raise _bad(param, f"names {name!r:.60}, which is not among the tools given")
    return checked(ResponseFormat(OutputKind.TOOL_CALL, tools=names), tools, param)


def openai_tool_choice(body: dict[str, Any], tools: tuple[Any, ...]) -> ResponseFormat | None:
    """`tool_choice` "required" or {'type': 'function', 'function': {'name'}}: one call forced; None otherwise."""
    choice = body.get("tool_choice")
    if choice in (None, "none", "auto"):
        return None
    if choice == "required":
        return _forced((), tools, "tool_choice")
    fn = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad(
            "tool_choice",
            f"must be none, auto, required or {{'type': 'function', 'function': {{'name': ...}}}}, got {choice!r:.60}",
        )
    return _forced((fn["name"],), tools, "tool_choice")


def anthropic_format(body: dict[str, Any]) -> ResponseFormat | None:
    """`output_config.format` (or the beta's `output_format`): {'type': 'json_schema', 'schema': {...}}."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise _bad("output_config", f"must be an object, got {type(config).__name__}")
    param, fmt = "output_config.format", (config or {}).get("format")
    if fmt is None and body.get("output_format") is not None:
        param, fmt = "output_format", body["output_format"]
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise _bad(param, f"must be {{'type': 'json_schema', 'schema': {{...}}}}, got {fmt!r:.60}")
    schema = _schema(fmt.get("schema"), f"{param}.schema")
    return checked(ResponseFormat(OutputKind.JSON_SCHEMA, schema), (), f"{param}.schema")


def anthropic_tool_choice(choice: Any, tools: tuple[Any, ...]) -> ResponseFormat | None:
    """`tool_choice` {'type': 'any'} or {'type': 'tool', 'name'}: one call forced; None for auto and none."""
    kind = choice.get("type") if isinstance(choice, dict) else None
    if choice is None or kind in ("auto", "none"):
        return None
    if kind == "any":
        return _forced((), tools, "tool_choice")
    if kind == "tool" and isinstance(choice.get("name"), str):
        return _forced((choice["name"],), tools, "tool_choice")
    raise _bad("tool_choice", f"must be auto, any, tool (with a name) or none, got {choice!r:.60}")


def one_format(output: ResponseFormat | None, forced: ResponseFormat | None, param: str) -> ResponseFormat | None:
    """A request's one constraint: a JSON reply or a forced call, not both."""
    if output is not None and forced is not None:
        raise _bad(param, "a JSON output format and a forced tool call cannot both hold one reply")
    return output or forced
