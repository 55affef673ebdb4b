"""Tool calls in the engine on the tiny model with a tool-capable template: the template gets the tools,
the reply's calls are parsed, and a tool round costs only its new tokens and stays exact."""

import json

from engine import GenerationParams
from engine.context.prompt import tools_cost
from engine.types import FinishReason
from tests.app.tools.scripted import ADD, Script, tool_call_ids
from tests.engine.test_api import reference
from tests.turns import collect


def params(**kw) -> GenerationParams:
    return GenerationParams(**{"temperature": 0.0, "max_tokens": 10, "speculative": False, "tools": (ADD,), **kw})


def scripted(ids) -> GenerationParams:
    return params(max_tokens=len(ids) + 4, logits_processors=(Script(ids),))


async def turn(engine, conv, messages, p):
    return await collect(engine, conv, messages, p)


def test_tool_round_is_parsed_reuses_the_cache_and_matches_fresh_mlx_lm(tools_engine_with, tiny_tools_model):
    model, tokenizer = tiny_tools_model
    forced = tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')

    async def body(engine):
        messages = [{"role": "user", "content": "What is 2 plus 3?"}]
        text, first = await turn(engine, "c", messages, scripted(forced))
        messages += [
            {"role": "assistant", "content": text, "tool_calls": [c.to_openai() for c in first.tool_calls]},
            {"role": "tool", "content": "5.0", "tool_call_id": first.tool_calls[0].id},
        ]
        _, second = await turn(engine, "c", messages, params())
        return text, first, second

    text, first, second = tools_engine_with(body)
    # The template was given the tools: their definitions are in the prompt.
    assert '"name": "add"' in tokenizer.decode(list(first.prompt_ids))
    assert first.finish_reason == FinishReason.TOOL_CALLS
    assert first.tools_tokens > 20 and second.tools_tokens == first.tools_tokens
    assert list(first.reply_ids) == forced and text.startswith("<tool_call>")
    (call,) = first.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("add", {"a": 2, "b": 3}) and call.id
    # The continuation starts with the call's exact generated ids and computes only the result's tokens.
    held = len(first.prompt_ids) + len(first.reply_ids)
    assert list(second.prompt_ids[:held]) == list(first.prompt_ids) + forced
    assert second.reused_tokens == held
    assert second.prefilled_tokens == len(second.prompt_ids) - held
    assert "<tool_response>\n5.0\n</tool_response>" in tokenizer.decode(list(second.prompt_ids[held:]))
    assert list(second.reply_ids) == reference(model, list(second.prompt_ids), 10, tokenizer.eos_token_ids)


def test_template_without_tool_support_turns_tools_off_with_one_line(engine_with):
    async def body(engine):
        return await turn(engine, "c", [{"role": "user", "content": "hi"}], params())

    _, stats = engine_with(body)
    assert "no tool support" in stats.tools_off and stats.tool_calls == ()


def test_unparsable_call_is_left_as_text(tools_engine_with, tiny_tools_model):
    _, tokenizer = tiny_tools_model
    broken = list(tokenizer.encode("<tool_call>\n{not json\n</tool_call>", add_special_tokens=False))
    forced = broken + [tokenizer.eos_token_id]

    async def body(engine):
        return await turn(engine, "c", [{"role": "user", "content": "hi"}], scripted(forced))

    text, stats = tools_engine_with(body)
    assert stats.finish_reason == FinishReason.STOP and stats.tool_calls == () and "{not json" in text


def test_tools_cost_counts_the_definitions(tiny_tools_model):
    _, tokenizer = tiny_tools_model
    messages = [{"role": "user", "content": "hi"}]
    assert tools_cost(tokenizer, messages, [ADD]) > 20
    assert tools_cost(tokenizer, messages, []) == 0
