"""Constrained output: a `ResponseFormat` as an llguidance grammar, checked before any turn runs.

llguidance (docs/STRUCTURED_OUTPUT.md says why this engine) turns a JSON Schema into a grammar and
computes, token by token, which tokens may follow (engine/local/constrained.py applies that mask).
No MLX here: the server checks a request's schema with `check` and answers 400 naming what it
cannot honour, before the request waits for the engine.
"""

import json
from typing import Any

from engine.errors import ChinwagError
from engine.types import OutputKind, ResponseFormat

# Compact JSON, no whitespace between tokens: a model cannot pad a reply with endless blanks.
JSON_OPTIONS = {"whitespace_flexible": False}


class UnsupportedSchema(ChinwagError):
    """A schema (or a feature of one) the grammar engine cannot enforce."""


def _llguidance() -> Any:
    import llguidance

    return llguidance


def _schema_of(fmt: ResponseFormat) -> Any:
    if fmt.kind == OutputKind.JSON_OBJECT:
        return {"type": "object"}
    try:
        return json.loads(fmt.schema)
    except ValueError as e:
        raise UnsupportedSchema(f"the JSON schema is not JSON: {e}") from None


def tool_call_schema(tools: tuple[Any, ...], names: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON of one call ({"name", "arguments"}) of the functions in `tools` (OpenAI function
    definitions), only those named in `names` if any."""
    choices = []
    for tool in tools:
        fn = tool.get("function", {})
        if names and fn.get("name") not in names:
            continue
        params = fn.get("parameters") or {"type": "object"}
        choices.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn.get("name", "")}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not choices:
        raise UnsupportedSchema(f"no tool named {', '.join(names)} among the tools given")
    return choices[0] if len(choices) == 1 else {"anyOf": choices}


def json_grammar(schema: Any) -> str:
    """The llguidance grammar of JSON valid against `schema`; UnsupportedSchema names what it cannot enforce."""
    lib = _llguidance()
    if not isinstance(schema, (dict, bool)):
        raise UnsupportedSchema(f"a JSON schema is an object, got {type(schema).__name__}")
    try:
        grammar = lib.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_OPTIONS)
    except ValueError as e:
        raise UnsupportedSchema(f"unsupported JSON schema: {e}") from None
    error = lib.LLMatcher.validate_grammar(grammar)
    if error:  # e.g. 'Unimplemented keys: ["if", "then"]', 'Unknown format: hostname-x'
        raise UnsupportedSchema(f"unsupported JSON schema: {' '.join(error.split())[:300]}")
    return str(grammar)


def check(fmt: ResponseFormat, tools: tuple[Any, ...] = ()) -> None:
    """Raise UnsupportedSchema if `fmt` cannot be enforced (`tools`: GenerationParams.tools)."""
    if fmt.kind == OutputKind.TOOL_CALL:
        json_grammar(tool_call_schema(tools, fmt.tools))
    else:
        json_grammar(_schema_of(fmt))


def grammar(fmt: ResponseFormat) -> str:
    """The grammar of a JSON reply (JSON_SCHEMA, JSON_OBJECT); tool calls are built with their markers."""
    return json_grammar(_schema_of(fmt))
