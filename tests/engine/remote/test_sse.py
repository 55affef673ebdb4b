"""engine/remote/sse.py: event framing, keepalive comments and chunk decoding, without a server."""

import json

import pytest

from engine.errors import ChinwagError
from engine.remote import sse
from engine.types import FinishReason, TextDelta


def payloads(lines):
    reader = sse.EventLines(1 << 20)
    return [p for p in (reader.feed(line) for line in lines) if p is not None]


def test_data_lines_join_into_one_payload_per_event():
    assert payloads(["data: a", "data:b", "", ": comment", "", "data: c", ""]) == ["a\nb", "c"]
    assert payloads(["data: open"]) == []  # an event is complete only at its blank line


def test_keepalive_comments_give_done_and_total():
    assert sse.keepalive(": keepalive 64/300") == (64, 300)
    assert sse.keepalive(": ping") is None
    assert sse.keepalive("data: keepalive 1/2") is None


def chunk(**delta):
    return json.dumps({"choices": [{"delta": delta, "finish_reason": delta.pop("finish", None)}]})


def test_reasoning_is_wrapped_in_think_and_content_kept_as_received():
    turn, out = sse.Turn(), []
    for payload in (chunk(reasoning_content="Hmm."), chunk(content="Four."), chunk(finish="length")):
        assert sse.decode(payload, turn, out.append) is False
    assert out == [TextDelta("<think>Hmm."), TextDelta("</think>Four.")]
    assert turn.content == ["Four."] and turn.finish == FinishReason.LENGTH and turn.deltas == 2
    assert sse.without_reasoning("".join(turn.shown)) == "Four."
    assert sse.decode("[DONE]", turn, out.append) is True


def test_a_reply_ended_mid_reasoning_closes_its_think_block():
    turn = sse.Turn()
    sse.decode(chunk(reasoning="still thinking"), turn, lambda d: None)
    assert turn.close_reasoning() == TextDelta("</think>")
    assert sse.Turn().close_reasoning() is None


@pytest.mark.parametrize("payload", ["{not json", "[1, 2]", '{"error": {"message": "boom"}}'])
def test_bad_payloads_raise_one_line(payload):
    with pytest.raises(ChinwagError) as e:
        sse.decode(payload, sse.Turn(), lambda d: None)
    assert "\n" not in str(e.value)


def test_stats_take_the_servers_usage():
    turn = sse.Turn(usage={"prompt_tokens": 20, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}})
    stats = sse.stats(turn, 0.0, dropped=2, error="")
    assert (stats.prompt_tokens, stats.reused_tokens, stats.prefilled_tokens, stats.generated_tokens) == (20, 8, 12, 3)
    assert stats.finish_reason == FinishReason.STOP and stats.dropped_messages == 2


def test_lone_surrogates_a_server_sends_become_replacement_characters_utf_8_can_hold():
    turn, shown = sse.Turn(), []
    payload = (
        '{"choices": [{"delta": {"reasoning_content": "r\\ud800", "content": "a\\udfffb\\ud83d\\ude00",'
        ' "tool_calls": [{"index": 0, "id": "c\\ud800", "function": {"name": "f\\ud800", "arguments": "{\\"x\\": \\"\\ud800\\"}"}}]},'
        ' "finish_reason": "tool_calls"}]}'
    )
    sse.decode(payload, turn, shown.append)
    text = "".join(d.text for d in shown)
    assert "a\ufffdb\U0001f600" in text and "r\ufffd" in text  # a surrogate pair is one character, kept
    [call] = sse.tool_calls(turn)
    assert (call.id, call.name, json.loads(call.arguments)) == ("c\ufffd", "f\ufffd", {"x": "\ufffd"})
    (text + "".join(turn.content) + call.id + call.name + call.arguments).encode("utf-8")  # raises on a surrogate
