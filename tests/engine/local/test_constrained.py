"""Constrained decoding (engine/local/constrained.py): a reply held to a JSON schema, a JSON object or
one tool call by llguidance's token mask, on the tiny model's real BPE tokenizer.

The tiny model has random weights: without the mask it writes no JSON at all, so every reply that
parses here was made to by the mask (and EOS came only once the JSON was complete)."""

import json

import jsonschema
import pytest

from engine import TurnStats
from engine.constraint import UnsupportedSchema, check
from engine.types import GenerationParams, OutputKind, ResponseFormat
from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path, tools_engine_with  # noqa: F401
from tests.engine.test_api import reference
from tests.turns import collect

# Strings and arrays are bounded: a random model closes a string only by chance.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["cat", "dog"]},
        "xs": {"type": "array", "items": {"type": "integer", "minimum": -9, "maximum": 99}, "maxItems": 3},
    },
    "required": ["name", "age", "ok", "kind", "xs"],
    "additionalProperties": False,
}
HELLO = [{"role": "user", "content": "Hello"}]


def shaped(schema: dict = SCHEMA, **changes) -> GenerationParams:
    fmt = ResponseFormat(OutputKind.JSON_SCHEMA, json.dumps(schema))
    return GenerationParams(**{"temperature": 0.0, "max_tokens": 200, "response_format": fmt, **changes})


async def reply(engine, conv, messages, params) -> tuple[str, TurnStats]:
    text, stats = await collect(engine, conv, messages, params)
    assert stats is not None
    return text, stats


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_replies_validate_against_the_schema(engine_with, temperature):
    async def body(engine):
        return [await reply(engine, f"c{seed}", HELLO, shaped(temperature=temperature, seed=seed)) for seed in range(4)]

    for text, stats in engine_with(body):
        assert stats.finish_reason == "stop", (text, stats.error)
        jsonschema.validate(json.loads(text), SCHEMA)
        assert text == text.strip()  # compact JSON: nothing after the closing brace


def test_without_the_mask_the_tiny_model_writes_no_json(engine_with):
    async def body(engine):
        return await reply(engine, "c", HELLO, GenerationParams(temperature=0.0, max_tokens=40))

    text, _ = engine_with(body)
    with pytest.raises(ValueError):
        json.loads(text)


def test_json_object_is_any_object(engine_with):
    fmt = ResponseFormat(OutputKind.JSON_OBJECT)

    async def body(engine):
        return [
            await reply(
                engine,
                f"c{seed}",
                HELLO,
                GenerationParams(temperature=1.0, seed=seed, max_tokens=400, response_format=fmt),
            )
            for seed in (0, 2)
        ]

    for text, stats in engine_with(body):
        assert stats.finish_reason == "stop", text
        assert isinstance(json.loads(text), dict)


def test_max_tokens_cutting_the_json_short_says_length(engine_with):
    async def body(engine):
        return await reply(engine, "c", HELLO, shaped(max_tokens=6))

    text, stats = engine_with(body)
    assert stats.finish_reason == "length" and stats.generated_tokens == 6
    assert text.startswith('{"name"')
    with pytest.raises(ValueError):
        json.loads(text)


def test_speculation_is_off_while_constrained_and_says_why(engine_with):
    async def body(engine):
        return await reply(engine, "c", HELLO, shaped(speculative=True))

    text, stats = engine_with(body)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert stats.drafted_tokens == 0 and "constrained" in stats.speculation_off


def test_the_cache_stays_exact_after_a_constrained_reply(engine_with, tiny_model):
    """The follow-up (unconstrained) reuses the constrained reply's ids and equals a fresh computation."""
    model, tokenizer = tiny_model

    async def body(engine):
        first, stats = await reply(engine, "c", HELLO, shaped())
        follow = [*HELLO, {"role": "assistant", "content": first}, {"role": "user", "content": "And?"}]
        return stats, await reply(engine, "c", follow, GenerationParams(temperature=0.0, max_tokens=12))

    first, (_, second) = engine_with(body)
    assert second.reused_tokens >= first.prompt_tokens + first.generated_tokens - 1
    assert list(second.reply_ids) == reference(model, list(second.prompt_ids), 12, tokenizer.eos_token_ids)


def test_an_unsupported_feature_is_named():
    fmt = ResponseFormat(OutputKind.JSON_SCHEMA, json.dumps({"type": "object", "if": {"required": ["a"]}, "then": {}}))
    with pytest.raises(UnsupportedSchema, match=r'"if", "then"'):
        check(fmt)
    with pytest.raises(UnsupportedSchema, match="not JSON"):
        check(ResponseFormat(OutputKind.JSON_SCHEMA, "{nope"))


def test_an_unsupported_schema_fails_the_turn_with_its_name(engine_with):
    async def body(engine):
        return await reply(engine, "c", HELLO, shaped({"type": "string", "format": "hostname-x"}))

    text, stats = engine_with(body)
    assert stats.finish_reason == "error" and "hostname-x" in stats.error and text == ""


PICK = {
    "type": "function",
    "function": {
        "name": "pick",
        "parameters": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
}
NOTE = {"type": "function", "function": {"name": "note", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("names", [(), ("note",)])
def test_a_forced_tool_call_is_parsed_as_one(tools_engine_with, names):  # noqa: F811
    fmt = ResponseFormat(OutputKind.TOOL_CALL, tools=names)

    async def body(engine):
        params = GenerationParams(temperature=1.0, seed=3, max_tokens=200, tools=(PICK, NOTE), response_format=fmt)
        return await reply(engine, "c", HELLO, params)

    _, stats = tools_engine_with(body)
    assert stats.finish_reason == "tool_calls", stats.error
    (call,) = stats.tool_calls
    assert call.name in (names or ("pick", "note"))
    if call.name == "pick":
        jsonschema.validate(json.loads(call.arguments), PICK["function"]["parameters"])


def test_a_forced_tool_call_needs_a_json_tool_format(engine_with):
    """The plain ChatML fixture has no tool-call markers: forcing a call is refused before the turn, naming why."""
    fmt = ResponseFormat(OutputKind.TOOL_CALL)

    async def body(engine):
        with pytest.raises(UnsupportedSchema) as e:
            await reply(engine, "c", HELLO, GenerationParams(max_tokens=20, tools=(PICK,), response_format=fmt))
        return str(e.value)

    assert "writes no tool calls" in engine_with(body)
