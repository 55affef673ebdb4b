"""engine/remote/backend.py behind Engine: a server's model answers the whole backend interface."""

import asyncio

import pytest

from engine import Engine, GenerationParams, TextDelta
from engine.backend import StopSignal
from engine.paths import kv_file_name
from engine.remote.backend import RemoteBackend
from tests.remote_standin import StandIn


@pytest.fixture
def standin():
    with StandIn() as s:
        yield s


def test_a_servers_model_reads_no_draft_and_forget_drops_its_replies_and_local_caches(standin, chinwag_home):
    saved = chinwag_home / "kv" / "some-model" / kv_file_name("c")
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"saved by an earlier run")
    messages = [{"role": "user", "content": "hi"}]

    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#reasoning")
            backend = engine._backend
            assert isinstance(backend, RemoteBackend)
            ahead = await engine.prefill("c", messages, GenerationParams())
            adopted = await engine.adopt("draft", "c")
            reply = "".join([e.text async for e in engine.chat("c", messages) if isinstance(e, TextDelta)])
            remembered = dict(backend._replies)
            await engine.forget("c")
            return ahead, adopted, reply, remembered, dict(backend._replies)
        finally:
            await engine.close()

    ahead, adopted, reply, remembered, after = asyncio.run(main())
    assert not ahead.finished and ahead.reason == "the model is served elsewhere" and adopted is False
    assert remembered == {"c": {reply: "The answer is 4."}} and after == {}
    assert not saved.exists()  # the local caches of a deleted chat go too, whichever backend is current


def test_a_constrained_reply_is_asked_of_the_server_in_openais_fields(standin, chinwag_home):
    """The server enforces the format: response_format and tool_choice reach it as OpenAI's API spells them."""
    from engine.types import OutputKind, ResponseFormat

    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    formats = [
        ResponseFormat(OutputKind.JSON_SCHEMA, schema, "point"),
        ResponseFormat(OutputKind.JSON_OBJECT),
        ResponseFormat(OutputKind.TOOL_CALL, tools=("f",)),
        ResponseFormat(OutputKind.TOOL_CALL),
    ]

    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#chat")
            for i, fmt in enumerate(formats):
                params = GenerationParams(response_format=fmt, tools=tools if fmt.kind == OutputKind.TOOL_CALL else ())
                [e async for e in engine.chat(f"c{i}", [{"role": "user", "content": "hi"}], params)]
        finally:
            await engine.close()

    asyncio.run(main())
    bodies = [body for path, _, body in standin.requests if path.endswith("/chat/completions")]
    assert bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "point",
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "strict": True,
        },
    }
    assert bodies[1]["response_format"] == {"type": "json_object"}
    assert bodies[2]["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert bodies[3]["tool_choice"] == "required" and "response_format" not in bodies[3]


def test_a_servers_model_answers_every_backend_method_itself(standin, chinwag_home):
    """Engine delegates without asking which backend it has: each Protocol method has a remote answer."""
    from engine.backend import Backend
    from engine.types import BackgroundPrefill, ChatMessage, ForkedCache, MemoryReport, TokenCount

    members = {n for n in vars(Backend) if not n.startswith("_")}
    messages = [ChatMessage.from_openai({"role": "user", "content": "hello there"})]

    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#chat")
            backend = engine._backend
            params = GenerationParams(context_cap=1000)
            answers = {
                "prefill": await backend.prefill("c", messages, params, None),
                "fork": await backend.fork("c", "d", messages, params),
                "adopt": await backend.adopt("draft", "c"),
                "forget": await backend.forget("c"),
                "wait_background": await backend.wait_background(),
                "background_result": backend.background_result(),
                "cancel_background": backend.cancel_background(),
                "count_tokens": await backend.count_tokens("x" * 40, params),
                "count_prompt": await backend.count_prompt(messages, params),
                "memory_stats": await backend.memory_stats(),
                "loaded_memory": backend.loaded_memory(),
                "chat": [e async for e in backend.chat("c", messages, params, StopSignal())][-1],
            }
            # Through Engine, the same answers: no local thread was asked (it never started).
            through = (
                await engine.wait_background(),
                engine.background_result(),
                await engine.memory_stats(),
                await engine.count_tokens("x" * 40, params),
                await engine.fork("c", "d", messages, params),
                engine.state.weight_bytes,
            )
            return answers, through, engine._local.thread
        finally:
            await engine.close()

    answers, through, thread = asyncio.run(main())
    assert set(answers) == members  # a method added to the Protocol needs its remote answer here
    assert answers["prefill"] == BackgroundPrefill(0, 0, 0, False, "the model is served elsewhere")
    assert answers["fork"] == ForkedCache(0, 0, "the model is served elsewhere") and answers["adopt"] is False
    assert answers["wait_background"] is None and answers["background_result"] is None
    assert answers["count_tokens"] == TokenCount(10, 1000, exact=False)
    assert answers["count_prompt"] == TokenCount(3, 1000, exact=False)  # "hello there": 11 characters
    assert answers["memory_stats"] == MemoryReport(0, 0, 0, 0, 0, 0, 0, 0.0, 0.0)
    assert answers["loaded_memory"] == (0, 0) and answers["chat"].generated_tokens > 0
    assert through == (None, None, answers["memory_stats"], answers["count_tokens"], answers["fork"], 0)
    assert thread is None


def test_a_servers_turn_stopped_before_its_first_event_writes_nothing_and_ends_cancelled(standin, chinwag_home):
    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#slow")
            turn = engine.chat("c", [{"role": "user", "content": "hi"}])
            turn.stop()
            events = [e async for e in turn]
            return events
        finally:
            await engine.close()

    events = asyncio.run(main())
    assert not any(isinstance(e, TextDelta) for e in events)
    assert events[-1].finish_reason == "cancelled" and events[-1].generated_tokens == 0


def test_tool_rounds_reach_the_server_in_openais_shape_whichever_shape_they_came_in(standin, chinwag_home):
    """One tool-call shape: a flat call (the API server's parser) and a ChatMessage go out nested, as OpenAI's."""
    from engine.types import ChatMessage, Role, ToolCall

    nested = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
    history = [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 2}}]},
        ChatMessage(Role.TOOL, "2", tool_call_id="call_1", name="add"),
    ]

    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#chat")
            [e async for e in engine.chat("c", history)]
            typed = [ChatMessage.from_openai(m) for m in history]
            assert typed[1].tool_calls == (ToolCall("call_1", "add", '{"a": 2}'),)
            [e async for e in engine.chat("d", typed)]
        finally:
            await engine.close()

    asyncio.run(main())
    bodies = [body for path, _, body in standin.requests if path.endswith("/chat/completions")]
    for body in bodies:
        assert body["messages"] == [
            {"role": "user", "content": "add"},
            {"role": "assistant", "content": "", "tool_calls": [nested]},
            {"role": "tool", "content": "2", "tool_call_id": "call_1", "name": "add"},
        ]
