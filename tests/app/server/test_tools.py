"""Tools through `chinwag serve` with the official openai client: `tools` reach the model's template, its
calls come back as OpenAI `tool_calls`, and the client's echo of them (plus `tool` messages) continues the cache.

The tiny model cannot choose to call a tool: a logits processor scripts its reply (tests/app/tools/scripted.py)
and the real engine does the rest (template, cache, detokenizer, tool parser)."""

import json
from dataclasses import replace

import openai
import pytest

from engine import Engine
from engine.types import TurnOrigin
from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)
from tests.app.tools.scripted import ADD, Script, tool_call_ids


class ScriptedEngine(Engine):
    """The real engine; the next turns' first tokens are forced (one script a turn, while scripts remain)."""

    def __init__(self, *scripts):
        super().__init__()
        self.scripts = list(scripts)
        self.seen: list = []  # the messages and tools of every turn, as the engine got them

    def chat(self, conversation_id, messages, params=None, origin=TurnOrigin.SCRIPT):
        self.seen.append((list(messages), params.tools if params else ()))
        if self.scripts and params is not None:
            params = replace(params, logits_processors=(Script(self.scripts.pop(0)),), speculative=False)
        return super().chat(conversation_id, messages, params, origin)


@pytest.fixture
def forced(tiny_tools_model):  # noqa: F811
    _, tokenizer = tiny_tools_model
    return tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)


def test_tool_calls_in_openai_shape_and_the_round_trip_reuses_the_cache(serve, tiny_tools_model_path, forced):  # noqa: F811
    engine = ScriptedEngine(forced)
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    c = client(s.url)
    messages: list = [{"role": "user", "content": "What is 2 plus 3?"}]
    first = c.chat.completions.create(
        model="", messages=messages, tools=[ADD], max_tokens=len(forced) + 4, temperature=0
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None  # the call is not text
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert (call.function.name, json.loads(call.function.arguments)) == ("add", {"a": 2, "b": 3})
    assert engine.seen[0][1] == (ADD,)  # the definitions reached the engine (and so the template)
    assert first.usage.completion_tokens == len(forced)

    # The client sends the call back as OpenAI clients do (no text, tool_calls) with the tool's result.
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "5"},
    ]
    second = c.chat.completions.create(model="", messages=messages, tools=[ADD], max_tokens=3, temperature=0)
    # The echo became the model's exact generated text: the whole first turn is reused, only the result is new.
    held = first.usage.prompt_tokens + first.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == held < second.usage.prompt_tokens
    sent, _ = engine.seen[1]
    assert sent[1].role == "assistant" and sent[1].content.startswith("<tool_call>")
    assert sent[2].to_openai() == {"role": "tool", "content": "5", "tool_call_id": call.id}
    assert second.choices[0].finish_reason in ("length", "stop") and not second.choices[0].message.tool_calls


def test_streamed_tool_calls_and_an_unknown_echo(serve, tiny_tools_model_path, forced):  # noqa: F811
    engine = ScriptedEngine(forced)
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    c = client(s.url)
    messages: list = [{"role": "user", "content": "What is 2 plus 3?"}]
    chunks = list(
        c.chat.completions.create(
            model="",
            messages=messages,
            tools=[ADD],
            max_tokens=len(forced) + 4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    calls = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or []]
    assert "<tool_call>" not in text
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        (0, "add", {"a": 2, "b": 3})
    ]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens == len(forced)

    # A call this server did not make (another server's, or one from before a restart) is accepted too.
    other = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_elsewhere", "type": "function", "function": {"name": "add", "arguments": "{}"}}],
    }
    tool = {"role": "tool", "tool_call_id": "call_elsewhere", "content": "0"}
    reply = c.chat.completions.create(model="", messages=[*messages, other, tool], max_tokens=2, temperature=0)
    assert reply.usage.completion_tokens == 2
    written, _ = engine.seen[-1]
    assert written[1].content == '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>'


def test_tool_choice_none_gives_the_model_no_tools(serve, tiny_tools_model_path):  # noqa: F811
    engine = ScriptedEngine()
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    reply = client(s.url).chat.completions.create(
        model="", messages=[{"role": "user", "content": "Hi"}], tools=[ADD], tool_choice="none", max_tokens=2
    )
    assert reply.choices[0].finish_reason == "length" and engine.seen[0][1] == ()
