"""A reply with tools end to end: the tiny tools model (scripted) calls a real MCP server's tool,
with approvals, and continues from the result; the round limit ends a loop."""

import sys

from app.tools.client import ToolHost
from app.tools.config import Policy, ServerConfig, ToolsConfig
from app.tools.loop import RoundLimit, ToolRun, ToolStarted, reply
from app.tools.policy import Answer, Approvals
from engine import GenerationParams, TextDelta, TurnStats
from tests.app.tools.scripted import Repeat, Script, tool_call_ids
from tests.tools_servers.launch import SCRIPT


def calculator(policy=Policy.ASK) -> ServerConfig:
    return ServerConfig("calc", command=sys.executable, args=(SCRIPT, "calculator"), policy=policy)


def run_reply(engine, processor, policy, answers, max_rounds=8, max_tokens=64):
    async def turn(msgs, p):
        text, stats = "", None
        async for ev in engine.chat("c", msgs, p):
            if isinstance(ev, TextDelta):
                text += ev.text
            elif isinstance(ev, TurnStats):
                stats = ev
        return text, stats

    asked, events = [], []

    async def ask(call, spec):
        asked.append((call.name, spec.server))
        return answers.pop(0)

    async def go():
        server = calculator(policy)
        host = ToolHost([server])
        try:
            assert await host.start() == {}
            params = GenerationParams(
                temperature=0.0, max_tokens=max_tokens, speculative=False, logits_processors=(processor,)
            )
            messages = [{"role": "user", "content": "What is 2 plus 3?"}]
            approvals = Approvals(ToolsConfig((server,)))
            return await reply(turn, messages, params, host, approvals, ask, events.append, max_rounds)
        finally:
            await host.close()

    return go, asked, events


def test_approved_call_runs_and_the_model_continues(tools_engine_with, tiny_tools_model):
    _, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')

    async def body(engine):
        go, asked, events = run_reply(engine, Script(forced), Policy.ASK, [Answer.ONCE])
        added, stats = await go()
        return added, stats, asked, events

    added, stats, asked, events = tools_engine_with(body)
    assert asked == [("add", "calc")]
    started, run = events  # said before the call runs, then its result
    assert isinstance(started, ToolStarted) and started.asked and started.call == run.call
    assert isinstance(run, ToolRun) and run.allowed and run.result.text == "5.0" and run.server == "calc"
    assert [m["role"] for m in added] == ["assistant", "tool", "assistant"]
    assert added[0]["tool_calls"][0]["function"]["name"] == "add"
    assert added[1] == {"role": "tool", "content": "5.0", "tool_call_id": run.call.id, "name": "add"}
    assert stats.finish_reason != "tool_calls"
    # The continuation computed only the result's tokens and the generation prompt.
    assert stats.prefilled_tokens < 60 and stats.reused_tokens > 10 * stats.prefilled_tokens


def test_denied_call_does_not_run(tools_engine_with, tiny_tools_model):
    _, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')

    async def body(engine):
        go, asked, events = run_reply(engine, Script(forced), Policy.ASK, [Answer.DENY])
        added, _ = await go()
        return added, asked, events

    added, asked, events = tools_engine_with(body)
    assert asked and [type(e) for e in events] == [ToolRun] and not events[0].allowed
    assert added[1]["content"] == "error: the user did not allow this call"


def test_round_limit_ends_a_loop_with_a_clear_line(tools_engine_with, tiny_tools_model):
    _, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 1, "b": 1}')

    async def body(engine):
        go, asked, events = run_reply(engine, Repeat(forced), Policy.ALLOW, [], max_rounds=2, max_tokens=len(forced))
        added, _ = await go()
        return added, asked, events

    added, asked, events = tools_engine_with(body)
    assert asked == []  # allowed by the server's policy: never asked
    assert [type(e) for e in events] == [ToolStarted, ToolRun, ToolStarted, ToolRun, RoundLimit]
    assert not events[0].asked
    assert "stopped after 2 tool rounds" in events[-1].text
    assert [m["role"] for m in added] == ["assistant", "tool", "assistant", "tool"]
