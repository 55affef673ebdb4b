"""Shared prefixes through `chinwag serve` with the official openai client: a new session with another's
system prompt, the same after a restart, and a tool call sent back re-serialized, each computes only what
follows the prefix some cache holds, and says so in `usage.prompt_tokens_details.cached_tokens`."""

import openai

from tests.app.server.test_tools import ScriptedEngine, client
from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)
from tests.app.tools.scripted import ADD, tool_call_ids
from tests.family_chat import LONG_SYSTEM


def ask(c: openai.OpenAI, question: str) -> openai.types.chat.ChatCompletion:
    messages = [LONG_SYSTEM, {"role": "user", "content": question}]
    return c.chat.completions.create(model="", messages=messages, max_tokens=8, temperature=0)  # type: ignore[arg-type]


def cached(reply: openai.types.chat.ChatCompletion) -> int:
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cached_tokens or 0


def test_sessions_sharing_a_system_prompt_read_it_once_also_after_a_restart(
    serve, tiny_model, chinwag_home, tmp_path, monkeypatch
):
    _, tokenizer = tiny_model
    system = len(tokenizer.encode(LONG_SYSTEM["content"], add_special_tokens=False))
    s = serve()
    first = ask(client(s.url), "Hello, how are you today?")
    second = ask(client(s.url), "What is the capital of France?")
    s.stop()
    assert system > 1400 and cached(first) == 0
    assert cached(second) >= 0.9 * system and second.usage and cached(second) < second.usage.prompt_tokens
    after = serve()  # the same data folder: the caches saved at the stop
    third = ask(client(after.url), "Tell me a story about a cat.")
    after.stop()
    assert cached(third) >= 0.9 * system

    # Each reply is what a server that holds nothing computes (a data folder of its own).
    for question, shared in (("What is the capital of France?", second), ("Tell me a story about a cat.", third)):
        home = tmp_path / f"empty-{question[:4]}"
        home.mkdir()
        monkeypatch.setenv("CHINWAG_HOME", str(home))
        cold_server = serve()
        cold = ask(client(cold_server.url), question)
        cold_server.stop()
        assert cached(cold) == 0 and cold.choices[0].message.content == shared.choices[0].message.content
        assert shared.choices[0].message.content and shared.usage and shared.usage.completion_tokens == 8


def test_a_re_serialized_tool_call_costs_only_what_follows_it(serve, tiny_tools_model, tiny_tools_model_path):  # noqa: F811
    _, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')
    engine = ScriptedEngine(forced)
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    c = client(s.url)
    messages: list = [LONG_SYSTEM, {"role": "user", "content": "What is 2 plus 3?"}]
    first = c.chat.completions.create(
        model="",
        messages=messages,
        tools=[ADD],  # type: ignore[list-item]
        max_tokens=len(forced) + 4,
        temperature=0,
    )
    assert first.choices[0].finish_reason == "tool_calls" and first.usage is not None
    # Sent back as an agent framework may: another id, the arguments as compact JSON.
    call = {"id": "call_renamed", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_renamed", "content": "5"},
    ]
    second = c.chat.completions.create(model="", messages=messages, tools=[ADD], max_tokens=3, temperature=0)  # type: ignore[list-item]
    assert second.usage is not None
    written, _ = engine.seen[-1]
    assert written[2].content == '<tool_call>\n{"name": "add", "arguments": {"a":2,"b":3}}\n</tool_call>'
    # No recorded conversation matches it message by message, yet everything before the call is reused:
    # only the call as re-serialized, the result and the generation prompt are computed.
    assert cached(second) >= first.usage.prompt_tokens
    assert second.usage.prompt_tokens - cached(second) < len(forced) + 24
