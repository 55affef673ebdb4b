"""engine/remote/backend.py behind Engine: a server's model answers the whole backend interface."""

import asyncio

import pytest

from engine import Engine, GenerationParams, TextDelta
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
