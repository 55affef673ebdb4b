"""engine/turns.py through Engine: the handle `chat` returns at call time, and the announcements of
every turn's start and end with its origin."""

import asyncio

import pytest

from engine import ChinwagError, Engine, GenerationParams, TextDelta, TurnStats
from engine.turns import ChatTurn
from engine.types import FinishReason, TurnAnnounced, TurnOrigin

LONG = GenerationParams(temperature=0.0, max_tokens=200)
HI = [{"role": "user", "content": "Tell me a long story about a cat."}]


async def events(turn: ChatTurn) -> list:
    return [ev async for ev in turn]


def test_the_handle_comes_at_call_time_and_its_stop_before_the_first_event_ends_the_turn(engine_with):
    async def body(engine):
        turn = engine.chat("s", HI, LONG)
        assert isinstance(turn, ChatTurn) and not turn.stopped
        turn.stop()  # before anything ran
        stopped = await events(turn)
        again = await events(engine.chat("s", HI, LONG))  # the engine goes on; the same chat replies
        return stopped, again

    stopped, again = engine_with(body)
    assert isinstance(stopped[-1], TurnStats) and stopped[-1].finish_reason == FinishReason.CANCELLED
    assert stopped[-1].generated_tokens <= 1 and sum(isinstance(e, TextDelta) for e in stopped) <= 1
    assert again[-1].finish_reason != FinishReason.CANCELLED and again[-1].generated_tokens > 1


def test_the_handles_stop_mid_reply_ends_it_within_a_token(engine_with):
    async def body(engine):
        turn, seen = engine.chat("m", HI, LONG), []
        async for ev in turn:
            seen.append(ev)
            if isinstance(ev, TextDelta):
                turn.stop()
        return seen

    seen = engine_with(body)
    stats = seen[-1]
    assert stats.finish_reason == FinishReason.CANCELLED and 1 <= stats.generated_tokens <= 3


def test_every_turn_is_announced_in_order_with_its_origin_and_its_end(engine_with):
    async def body(engine):
        heard: list[TurnAnnounced] = []
        unsubscribe = engine.turns.subscribe(heard.append)
        params = GenerationParams(temperature=0.0, max_tokens=3)
        await events(engine.chat("a", HI, params, origin=TurnOrigin.WINDOW))
        await events(engine.chat("b", HI, params, origin=TurnOrigin.SERVER))
        with pytest.raises(ChinwagError, match="no user message"):  # refused: it still ends, without stats
            await events(engine.chat("c", [{"role": "system", "content": "x"}], params, origin=TurnOrigin.TERMINAL))
        running = []
        engine.turns.subscribe(lambda e: running.append(engine.turns.running))
        await events(engine.chat("d", HI, params))  # a script's, by default
        unsubscribe()
        await events(engine.chat("e", HI, params))
        return heard, running

    heard, running = engine_with(body)
    assert [(e.conversation_id, e.origin, e.ended) for e in heard] == [
        ("a", "window", False),
        ("a", "window", True),
        ("b", "server", False),
        ("b", "server", True),
        ("c", "terminal", False),
        ("c", "terminal", True),
        ("d", "script", False),
        ("d", "script", True),
    ]
    assert [e.stats is not None for e in heard if e.ended] == [True, True, False, True]
    assert heard[1].stats.generated_tokens == 3
    assert [tuple(t.conversation_id for t in r) for r in running] == [("d",), (), ("e",), ()]


def test_a_listener_that_fails_is_logged_and_the_turn_goes_on(engine_with, chinwag_home):
    def broken(event):
        raise KeyError("listener")

    async def body(engine):
        engine.turns.subscribe(broken)
        return await events(engine.chat("x", HI, GenerationParams(temperature=0.0, max_tokens=2)))

    seen = engine_with(body)
    assert seen[-1].generated_tokens == 2
    assert "KeyError" in (chinwag_home / "chinwag.log").read_text()


def test_a_stop_before_the_turn_with_no_model_still_raises_the_one_line_error():
    async def main():
        engine = Engine()
        try:
            turn = engine.chat("x", HI)
            turn.stop()
            with pytest.raises(ChinwagError, match="no model is loaded"):
                await events(turn)
        finally:
            await engine.close()

    asyncio.run(main())


def test_tool_fields_leave_a_local_prompt_unchanged_whichever_shape_the_messages_come_in(engine_with):
    from engine.types import ChatMessage

    plain = [
        {"role": "user", "content": "add 2 and 3"},
        {"role": "assistant", "content": "calling add"},
        {"role": "tool", "content": "5"},
    ]
    with_tools = [
        plain[0],
        dict(plain[1], tool_calls=[{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]),
        dict(plain[2], tool_call_id="c1", name="add"),
    ]
    params = GenerationParams(temperature=0.0, max_tokens=2)

    async def body(engine):
        out = []
        for i, messages in enumerate([plain, with_tools, [ChatMessage.from_openai(m) for m in with_tools]]):
            out.append((await events(engine.chat(f"p{i}", messages, params)))[-1])
        return out

    stats = engine_with(body)
    assert stats[0].prompt_ids == stats[1].prompt_ids == stats[2].prompt_ids and stats[0].prompt_ids
    assert stats[1].reused_tokens > 0 and stats[2].reused_tokens > 0  # the same text: the cache is shared
