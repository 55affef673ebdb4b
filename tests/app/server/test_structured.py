"""Structured output through `chinwag serve` with the official clients: OpenAI's `response_format` and
forcing `tool_choice`, Anthropic's `output_config.format` and `tool_choice` any/tool. The tiny model's
random weights write no JSON by themselves: every reply that validates was held to it by the mask."""

import json

import anthropic
import jsonschema
import openai
import pytest

from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)
from tests.engine.local.test_constrained import PICK, SCHEMA
from tests.tiny_model import TOOLS_TEMPLATE, build_tiny_model

HELLO = [{"role": "user", "content": "Describe a pet as JSON."}]
FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}}


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)


def test_json_schema_replies_validate_also_at_temperature_1(serve):
    c = client(serve().url)
    for seed in range(3):
        r = c.chat.completions.create(
            model="", messages=HELLO, response_format=FORMAT, temperature=1.0, seed=seed, max_tokens=200
        )
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content[:80]
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)


def test_a_streamed_json_reply_validates_and_json_object_gives_an_object(serve):
    c = client(serve().url)
    stream = c.chat.completions.create(model="", messages=HELLO, response_format=FORMAT, max_tokens=200, stream=True)
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), SCHEMA)
    hello = [{"role": "user", "content": "Hello"}]  # (the tiny model's long keys would run into max_tokens on HELLO)
    r = c.chat.completions.create(
        model="", messages=hello, response_format={"type": "json_object"}, temperature=0, max_tokens=200
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content[:80]
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_max_tokens_cutting_the_json_short_is_length(serve):
    r = client(serve().url).chat.completions.create(model="", messages=HELLO, response_format=FORMAT, max_tokens=5)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5


def test_an_unsupported_schema_is_a_400_that_names_it(serve):
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "if": {}, "then": {}}}}
    with pytest.raises(openai.BadRequestError) as e:
        client(serve().url).chat.completions.create(model="", messages=HELLO, response_format=bad, max_tokens=5)
    assert 'Unimplemented keys: ["if", "then"]' in e.value.body["message"]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "pick"}}])
def test_tool_choice_forces_a_call(serve, tiny_tools_model_path, choice):  # noqa: F811
    c = client(serve(model=str(tiny_tools_model_path)).url)
    r = c.chat.completions.create(
        model="", messages=HELLO, tools=[PICK], tool_choice=choice, temperature=1.0, seed=1, max_tokens=200
    )
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "pick"
    jsonschema.validate(json.loads(call.function.arguments), PICK["function"]["parameters"])


def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="none", max_retries=0, timeout=120)


def test_anthropic_output_config_and_a_forced_tool(serve, tiny_tools_model_path):  # noqa: F811
    c = anthropic_client(serve(model=str(tiny_tools_model_path)).url)
    fmt = {"format": {"type": "json_schema", "schema": SCHEMA}}
    m = c.messages.create(model="", messages=HELLO, max_tokens=200, output_config=fmt)  # type: ignore[arg-type]
    assert m.stop_reason == "end_turn"
    jsonschema.validate(json.loads(m.content[0].text), SCHEMA)
    tool = {"name": "pick", "input_schema": PICK["function"]["parameters"]}
    m = c.messages.create(
        model="", messages=HELLO, max_tokens=200, tools=[tool], tool_choice={"type": "tool", "name": "pick"}
    )
    assert m.stop_reason == "tool_use"
    (use,) = [b for b in m.content if b.type == "tool_use"]
    jsonschema.validate(use.input, tool["input_schema"])
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(
            model="",
            messages=HELLO,
            max_tokens=5,
            output_config={"format": {"type": "json_schema", "schema": {"not": {}}}},
        )
    assert 'output_config.format.schema: unsupported JSON schema: Unimplemented keys: ["not"]' in str(e.value)


@pytest.mark.starter
def test_the_starter_answers_in_the_schema(serve):
    """SmolLM2's byte-level BPE (imported from its GGUF) through the tokenizer bridge, end to end."""
    from engine.models.folders import STARTER_ID

    schema = {
        "type": "object",
        "properties": {"country": {"type": "string", "maxLength": 40}, "capital": {"type": "string", "maxLength": 40}},
        "required": ["country", "capital"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "capital", "schema": schema}}
    c = openai.OpenAI(base_url=serve(model=STARTER_ID).url, api_key="none", max_retries=0, timeout=300)
    ask = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    for temperature in (0.0, 1.0):
        r = c.chat.completions.create(
            model=STARTER_ID, messages=ask, response_format=fmt, temperature=temperature, seed=0, max_tokens=60
        )
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content[:80]
        answer = json.loads(r.choices[0].message.content)
        jsonschema.validate(answer, schema)
    assert "paris" in answer["capital"].lower() or temperature == 1.0


# mlx-lm reads Qwen3-Coder's XML calls (`<function=name>`) from a template like this one.
XML_CALLS_TEMPLATE = TOOLS_TEMPLATE.replace(
    '<tool_call>\n{"name": <function-name>', "<tool_call>\n<function=<function-name>"
)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "pick"}}])
def test_forcing_a_call_on_a_model_without_json_calls_is_a_400_that_says_why(serve, tmp_path, choice):
    path = build_tiny_model(tmp_path / "xml-calls", chat_template=XML_CALLS_TEMPLATE)
    c = client(serve(model=str(path)).url)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="", messages=HELLO, tools=[PICK], tool_choice=choice, max_tokens=20)
    assert "only on a model that writes JSON tool calls" in e.value.body["message"]
    assert "qwen3_coder format" in e.value.body["message"]
    r = c.chat.completions.create(model="", messages=HELLO, tools=[PICK], max_tokens=4)  # not forced: it replies
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")


def test_forcing_a_call_on_a_model_that_writes_none_is_a_400(serve):
    with pytest.raises(openai.BadRequestError) as e:
        client(serve().url).chat.completions.create(
            model="", messages=HELLO, tools=[PICK], tool_choice="required", max_tokens=20
        )
    assert "writes no tool calls" in e.value.body["message"]
