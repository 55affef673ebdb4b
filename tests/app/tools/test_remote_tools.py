"""Tools with a model served elsewhere: `tools` in the OpenAI request, streamed `tool_calls` read back,
and a tool round sent in OpenAI's shape; against the stand-in and a real mlx_lm.server."""

import asyncio
import json
import signal

import pytest

from engine import Engine, GenerationParams
from engine.types import FinishReason
from tests.app.tools.test_engine_tools import ADD
from tests.engine.remote.test_standin import collect
from tests.remote_servers import MlxServer
from tests.remote_standin import StandIn

TOOLS = GenerationParams(temperature=0, max_tokens=8, tools=(ADD,))


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


def chat_round(spec):
    async def go():
        engine = Engine()
        try:
            await engine.load_model(spec)
            messages = [{"role": "user", "content": "What is 2 plus 3?"}]
            text, first, _ = await collect(engine, "c", messages, TOOLS)
            messages += [
                {"role": "assistant", "content": text, "tool_calls": [c.to_openai() for c in first.tool_calls]},
                {"role": "tool", "content": "5.0", "tool_call_id": "call_abc", "name": "add"},
            ]
            _, second, _ = await collect(engine, "c", messages, TOOLS)
            return first, second
        finally:
            await engine.close()

    return asyncio.run(go())


def test_streamed_tool_calls_are_read_and_the_round_goes_back_in_openai_shape():
    with StandIn() as standin:
        first, second = chat_round(f"{standin.url}#tool-call")
        bodies = [body for path, _raw, body in standin.requests if path.endswith("/chat/completions")]
    assert first.finish_reason == FinishReason.TOOL_CALLS
    (call,) = first.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_abc", "add", {"a": 2, "b": 3})
    assert bodies[0]["tools"] == [ADD]
    assistant, tool = bodies[1]["messages"][-2:]
    assert assistant["tool_calls"] == [call.to_openai()]
    assert tool == {"role": "tool", "content": "5.0", "tool_call_id": "call_abc", "name": "add"}
    assert second.finish_reason == FinishReason.STOP and second.tool_calls == ()


def test_a_real_mlx_lm_server_takes_the_tools_and_a_tool_round(tiny_tools_model_path, tmp_path):
    server = MlxServer(tiny_tools_model_path, tmp_path / "server.log")
    try:
        server.wait_ready()
        spec = f"{server.url}#default_model"
        first, second = chat_round(spec)
        plain = asyncio.run(_plain_prompt_tokens(spec))
    finally:
        server.kill(signal.SIGTERM)
    # The tool definitions reached the template: the prompt is longer than without them.
    assert first.prompt_tokens > plain + 20
    # A random model makes no call; the round sent after it is still accepted and rendered.
    assert second.error == "" and second.prompt_tokens > first.prompt_tokens


async def _plain_prompt_tokens(spec) -> int:
    engine = Engine()
    try:
        await engine.load_model(spec)
        _, stats, _ = await collect(
            engine,
            "p",
            [{"role": "user", "content": "What is 2 plus 3?"}],
            GenerationParams(temperature=0, max_tokens=8),
        )
        return stats.prompt_tokens
    finally:
        await engine.close()
