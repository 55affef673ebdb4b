"""The official anthropic client against `chinwag serve`'s /v1/messages on the tiny model."""

import json

import anthropic
import httpx
import pytest

from tests.app.server.test_tools import ScriptedEngine
from tests.app.tools.conftest import tiny_tools_model, tiny_tools_model_path  # noqa: F401 (fixtures)
from tests.app.tools.scripted import tool_call_ids

ADD = {
    "name": "add",
    "description": "Add two numbers.",
    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}
STORY = [{"role": "user", "content": "Tell me a story"}]
# This client has no sampling arguments (the API it targets dropped them); Anthropic's wire still takes them.
GREEDY: dict = {"extra_body": {"temperature": 0}}


def client(url: str, **kw) -> anthropic.Anthropic:
    base = url.removesuffix("/v1")  # the client adds /v1/messages
    return anthropic.Anthropic(base_url=base, api_key=kw.pop("api_key", "none"), max_retries=0, timeout=120, **kw)


def test_system_and_a_follow_up_read_from_the_cache(serve, tiny_model_path):
    s = serve()
    c = client(s.url)
    first = c.messages.create(model="", system="Be brief.", messages=STORY, max_tokens=6, **GREEDY)
    assert first.type == "message" and first.role == "assistant" and first.model == tiny_model_path.name
    assert first.stop_reason == "max_tokens" and first.stop_sequence is None
    assert first.usage.output_tokens == 6 and first.usage.cache_read_input_tokens == 0
    (block,) = first.content
    messages = [*STORY, {"role": "assistant", "content": block.text}, {"role": "user", "content": "And then?"}]
    second = c.messages.create(model="", system="Be brief.", messages=messages, max_tokens=4, **GREEDY)
    cached = second.usage.cache_read_input_tokens
    # The first turn's prompt and reply come from the cache; input_tokens are only the new ones.
    assert first.usage.input_tokens < cached and second.usage.input_tokens > 0
    assert [r.cached_tokens for r in s.server.service.recent] == [0, cached]


def test_streaming_sends_the_documented_events_and_the_same_reply(serve):
    s = serve()
    c = client(s.url)
    whole = c.messages.create(model="", messages=STORY, max_tokens=8, **GREEDY)
    with c.messages.stream(model="", messages=STORY, max_tokens=8, **GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    raw = [e.type for e in events if e.type in ANTHROPIC_EVENTS]  # the client adds its own (text...)
    assert raw[0] == "message_start" and raw[-2:] == ["message_delta", "message_stop"]
    assert raw[1] == "content_block_start" and raw[-3] == "content_block_stop"
    assert set(raw[2:-3]) == {"content_block_delta"}
    assert final.content[0].text == whole.content[0].text  # greedy: the same reply
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == whole.usage.input_tokens


ANTHROPIC_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}


def test_stop_sequences_end_the_reply_and_are_named(serve):
    s = serve()
    c = client(s.url)
    messages = [{"role": "user", "content": "Numbers 0 1 2 3"}]
    text = c.messages.create(model="", messages=messages, max_tokens=12, **GREEDY).content[0].text
    if len(text.strip()) < 4:
        pytest.skip("the tiny model's reply is too short to cut")
    stop = text[2:4]
    cut = c.messages.create(model="", messages=messages, max_tokens=12, **GREEDY, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert "".join(b.text for b in cut.content) == text[: text.index(stop)]


def test_top_k_1_is_the_greedy_reply(serve):
    s = serve()
    c = client(s.url)
    greedy = c.messages.create(model="", messages=STORY, max_tokens=8, **GREEDY)
    top1 = c.messages.create(
        model="", messages=STORY, max_tokens=8, extra_body={"temperature": 1.0, "top_p": 0.9, "top_k": 1}
    )
    assert top1.content[0].text == greedy.content[0].text


def test_count_tokens_is_the_prompt_a_reply_reads(serve):
    s = serve()
    c = client(s.url)
    counted = c.messages.count_tokens(model="", system="Be brief.", messages=STORY)
    reply = c.messages.create(model="", system="Be brief.", messages=STORY, max_tokens=2)
    assert counted.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens > 0


def test_an_assistant_prefill_is_written_on(serve):
    s = serve()
    c = client(s.url)
    longer = c.messages.create(model="", messages=STORY, max_tokens=12, **GREEDY).content[0].text
    start = c.messages.create(model="", messages=STORY, max_tokens=8, **GREEDY).content[0].text
    messages = [*STORY, {"role": "assistant", "content": start}]
    rest = c.messages.create(model="", messages=messages, max_tokens=4, **GREEDY)
    # The reply goes on from the end of the last assistant message, and is only what it added.
    assert rest.content[0].text == longer[len(start) :] and longer.startswith(start)


def test_errors_come_in_anthropics_shape(serve):
    s = serve(api_key="k3y")
    with pytest.raises(anthropic.AuthenticationError):
        client(s.url, api_key="wrong").messages.create(model="", messages=STORY, max_tokens=2)
    c = client(s.url, api_key="k3y")  # the key as Anthropic's clients send it
    with pytest.raises(anthropic.NotFoundError) as missing:
        c.messages.create(model="claude-no-such-model", messages=STORY, max_tokens=2)
    assert missing.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as bad:
        c.messages.create(model="", messages=STORY, max_tokens=0)
    assert "max_tokens" in bad.value.body["error"]["message"]
    headers = {"x-api-key": "k3y", "Content-Type": "application/json"}
    r = httpx.post(s.url + "/messages", content=json.dumps({"messages": STORY}), headers=headers)
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == "max_tokens: is required: the longest reply, in tokens"
    images = [{"role": "user", "content": [{"type": "image", "source": {}}]}]
    r = httpx.post(s.url + "/messages", json={"messages": images, "max_tokens": 2}, headers=headers)
    assert r.status_code == 400 and "only text and tool_result blocks" in r.json()["error"]["message"]


@pytest.fixture
def forced(tiny_tools_model):  # noqa: F811
    _, tokenizer = tiny_tools_model
    return tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')


def test_tool_use_and_a_tool_result_that_reuses_the_cache(serve, tiny_tools_model_path, forced):  # noqa: F811
    engine = ScriptedEngine(forced)
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    c = client(s.url)
    messages: list = [{"role": "user", "content": "What is 2 plus 3?"}]
    first = c.messages.create(model="", messages=messages, tools=[ADD], max_tokens=len(forced) + 4, **GREEDY)
    assert first.stop_reason == "tool_use"
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert (call.name, call.input) == ("add", {"a": 2, "b": 3}) and call.id
    assert not [b for b in first.content if b.type == "text"]  # the call's markup is no text
    as_openai = {"name": "add", "description": ADD["description"], "parameters": ADD["input_schema"]}
    assert engine.seen[0][1] == ({"type": "function", "function": as_openai},)  # what the template reads

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "5"}]},
    ]
    second = c.messages.create(model="", messages=messages, tools=[ADD], max_tokens=3, **GREEDY)
    held = first.usage.input_tokens + first.usage.cache_read_input_tokens + first.usage.output_tokens
    assert second.usage.cache_read_input_tokens == held  # the call written back as generated: only the result is new
    sent, _ = engine.seen[1]
    assert sent[1].content.startswith("<tool_call>") and sent[2].to_openai() == {
        "role": "tool",
        "content": "5",
        "tool_call_id": call.id,  # the tool_result's tool_use_id
    }
    assert second.stop_reason in ("max_tokens", "end_turn")


def test_streamed_tool_use(serve, tiny_tools_model_path, forced):  # noqa: F811
    engine = ScriptedEngine(forced)
    s = serve(engine=engine, model=str(tiny_tools_model_path))
    messages = [{"role": "user", "content": "What is 2 plus 3?"}]
    with client(s.url).messages.stream(
        model="", messages=messages, tools=[ADD], max_tokens=len(forced) + 4, **GREEDY
    ) as stream:
        deltas = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas == ["input_json_delta"]
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "add", {"a": 2, "b": 3})]


def test_a_turn_that_fails_mid_stream_ends_with_an_error_event(serve, monkeypatch):
    from engine import Engine

    engine = Engine()
    s = serve(engine=engine)
    model = engine._local.session.model
    real, calls = type(model).__call__, []

    def failing(self, *args, **kwargs):  # a bug in the third forward pass: mid-reply
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a broken kernel")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "__call__", failing)
    body = {"messages": STORY, "max_tokens": 8, "stream": True, "temperature": 0}
    with httpx.stream("POST", s.url + "/messages", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("event: ")]
        assert r.status_code == 200
    assert lines[0] == "event: message_start" and lines[-1] == "event: error"
    assert "event: message_stop" not in lines
    calls.clear()
    with pytest.raises(anthropic.APIStatusError) as failed:  # the client raises it, in Anthropic's shape
        with client(s.url).messages.stream(model="", messages=STORY, max_tokens=8, **GREEDY) as stream:
            list(stream)
    error = failed.value.body["error"]
    assert error["type"] == "api_error" and "a broken kernel" in error["message"] and "\n" not in error["message"]
