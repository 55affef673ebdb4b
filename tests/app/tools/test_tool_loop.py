"""A reply with tools end to end through the turn driver (app/chat/turn.py): the tiny tools model
(scripted) calls a real MCP server's tool, with approvals, and continues from the result; the round
limit ends a loop."""

import sys

from app.chat.events import Ended
from app.chat.tool_events import ToolRan
from app.chat.transcript import Transcript
from app.chat.turn import Tools, TurnDriver
from app.tools.client import ToolHost
from app.tools.config import Policy, ServerConfig, ToolsConfig
from app.tools.loop import ToolStarted
from app.tools.policy import Answer, Approvals
from engine import GenerationParams
from engine.types import ChatMessage, Role
from tests.app.tools.scripted import Repeat, Script, tool_call_ids
from tests.tools_servers.launch import SCRIPT


def calculator(policy=Policy.ASK) -> ServerConfig:
    return ServerConfig("calc", command=sys.executable, args=(SCRIPT, "calculator"), policy=policy)


def run_reply(engine, processor, policy, answers, max_rounds=8, max_tokens=64):
    """(go, asked, events): go() runs the reply and returns (the messages it added, its last stats);
    `events` gets the tool rounds' events and the end."""
    asked, events = [], []

    def keep(event):
        if isinstance(event, ToolStarted | ToolRan | Ended):
            events.append(event)

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
            tools = Tools(host, Approvals(ToolsConfig((server,))), ask, max_rounds)
            driver = TurnDriver(engine, Transcript("c"), keep, tools)
            reply = await driver.reply([ChatMessage(Role.USER, "What is 2 plus 3?")], params)
            return reply.added, reply.stats
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
    started, ran, ended = events  # said before the call runs, then its result
    run = ran.run
    assert isinstance(started, ToolStarted) and started.asked and started.call == run.call
    assert run.allowed and run.result.text == "5.0" and run.server == "calc"
    assert isinstance(ended, Ended) and ended.status == "complete" and not ended.note
    assert [m.role for m in added] == ["assistant", "tool", "assistant"]
    assert added[0].tool_calls[0].name == "add"
    assert added[1] == ChatMessage(Role.TOOL, "5.0", tool_call_id=run.call.id, name="add")
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
    assert asked and [type(e) for e in events] == [ToolRan, Ended] and not events[0].run.allowed
    assert added[1].content == "error: the user did not allow this call"


def test_round_limit_ends_a_loop_with_a_clear_line(tools_engine_with, tiny_tools_model):
    _, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 1, "b": 1}')

    async def body(engine):
        go, asked, events = run_reply(engine, Repeat(forced), Policy.ALLOW, [], max_rounds=2, max_tokens=len(forced))
        added, _ = await go()
        return added, asked, events

    added, asked, events = tools_engine_with(body)
    assert asked == []  # allowed by the server's policy: never asked
    assert [type(e) for e in events] == [ToolStarted, ToolRan, ToolStarted, ToolRan, Ended]
    assert not events[0].asked
    assert events[-1].note.startswith("Stopped after 2 tool rounds")
    assert [m.role for m in added] == ["assistant", "tool", "assistant", "tool"]
