"""A hostile server cannot exhaust memory or hang Chinwag: every response is bounded in bytes, line
length, nesting and pieces past max_tokens, and every wait has a deadline whose message names it.

The stand-in (tests/remote_standin.py) plays the server on loopback; the bounds are made tiny
through engine/remote/network.LIMITS and the timeouts in engine/remote/errors.py.
"""

import asyncio
import itertools
import json
import time
import tracemalloc
import zlib

import pytest

from engine import ChinwagError, Engine, GenerationParams, TextDelta, TurnStats
from engine.remote import errors, network, servers, sse
from tests.remote_standin import StandIn, chunk

# Generous: the cases below would run for minutes (or forever) without their bounds.
WITHIN_S = 20


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


@pytest.fixture
def small_limits(monkeypatch):
    limits = network.Limits(line_bytes=64 << 10, event_bytes=128 << 10, body_bytes=256 << 10, stream_bytes=1 << 20)
    monkeypatch.setattr(network, "LIMITS", limits)
    return limits


def chat_once(spec, params=None):
    """(reply text, TurnStats) of one turn, or the ChinwagError raised, and how long it took."""

    async def go():
        engine = Engine()
        text, stats = [], None
        try:
            await engine.load_model(spec)
            async for ev in engine.chat("c", [{"role": "user", "content": "hi"}], params or GenerationParams()):
                if isinstance(ev, TextDelta):
                    text.append(ev.text)
                elif isinstance(ev, TurnStats):
                    stats = ev
        finally:
            await engine.close()
        return "".join(text), stats

    started = time.monotonic()
    try:
        result = asyncio.run(go())
    except ChinwagError as e:
        result = e
    return result, time.monotonic() - started


def one_line_error(result) -> str:
    assert isinstance(result, ChinwagError), result
    message = str(result)
    assert "\n" not in message and message.startswith("server 127.0.0.1:"), message
    return message


def pieces_forever(body, headers):
    return itertools.repeat(chunk("x"))


def test_a_stream_that_ignores_max_tokens_is_cut_off_after_a_margin_and_says_so():
    with StandIn(script=pieces_forever) as s:
        (text, stats), took = chat_once(f"{s.url}#scripted", GenerationParams(max_tokens=5))
    limit = sse.piece_limit(5)
    assert text == "x" * (limit + 1) and stats.generated_tokens == limit + 1
    assert stats.finish_reason == "length"
    assert "kept sending past max_tokens (5)" in stats.error and stats.error.startswith("server 127.0.0.1:")
    assert took < WITHIN_S


@pytest.mark.parametrize(
    "script, expected",
    [
        # One line that never ends, then one event (data lines without the blank line) that never ends.
        (lambda b, h: itertools.chain([b"data: "], itertools.repeat(b"x" * 4096)), "sent a line over 65,536 bytes"),
        (lambda b, h: itertools.repeat(b"data: " + b"x" * 1000 + b"\n"), "sent an event over 131,072 bytes"),
        # Blank lines forever: nothing is kept, but the bytes read are bounded too.
        (lambda b, h: itertools.repeat(b"\n" * 4096), "sent a reply over 1,048,576 bytes"),
    ],
)
def test_a_line_an_event_or_a_stream_that_never_ends_is_one_line(small_limits, script, expected):
    with StandIn(script=script) as s:
        result, took = chat_once(f"{s.url}#scripted")
        assert s.sent < 16 * small_limits.stream_bytes  # the server was stopped, not read to the end
    assert expected in one_line_error(result)
    assert took < WITHIN_S


def gzip_bomb(inflated: int) -> bytes:
    """A gzip body of blank lines that inflates to `inflated` bytes (~1000x smaller itself)."""
    z = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b"\n" * (1 << 20)
    return b"".join([*(z.compress(block) for _ in range(inflated >> 20)), z.flush()])


def test_a_gzip_bomb_in_a_stream_is_stopped_at_the_bound_without_inflating(small_limits):
    bomb = gzip_bomb(64 << 20)
    with StandIn(script=lambda b, h: [bomb], stream_headers={"Content-Encoding": "gzip"}) as s:
        tracemalloc.start()
        try:
            result, took = chat_once(f"{s.url}#scripted")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert "sent a reply over 1,048,576 bytes" in one_line_error(result)
    assert peak < 16 << 20  # a 64 MB inflation never happened
    assert took < WITHIN_S


def test_a_gzip_bomb_model_list_is_one_line_and_costs_no_memory(small_limits):
    with StandIn(models_body=gzip_bomb(64 << 20), models_gzip=True) as s:
        tracemalloc.start()
        try:
            with pytest.raises(ChinwagError, match=r"^server lab: sent a model list over 262,144 bytes"):
                servers.fetch_model_ids(servers.Server("lab", s.url))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 16 << 20


def test_a_huge_model_list_or_error_body_is_bounded(small_limits):
    huge = json.dumps({"data": [{"id": "m" * 100}] * 10_000}).encode()  # ~1 MB
    with StandIn(models_body=huge) as s:
        with pytest.raises(ChinwagError, match="sent a model list over 262,144 bytes"):
            servers.fetch_model_ids(servers.Server("lab", s.url))
    error = json.dumps({"error": {"message": "boom " * 400_000}}).encode()  # 2 MB of error
    with StandIn(models_body=error, models_status=500) as s:
        with pytest.raises(ChinwagError) as e:
            servers.fetch_model_ids(servers.Server("lab", s.url))
    assert str(e.value).startswith("server lab: HTTP 500") and len(str(e.value)) < 400


def test_json_nested_a_million_deep_is_one_line_not_a_bug():
    deep = b"[" * 1_000_000
    with StandIn(models_body=deep) as s:
        with pytest.raises(ChinwagError, match="did not answer an OpenAI model list"):
            servers.fetch_model_ids(servers.Server("lab", s.url))
    with StandIn(script=lambda b, h: [b"data: " + deep + b"\n\n"]) as s:
        result, _ = chat_once(f"{s.url}#scripted")
    assert "sent malformed stream data" in one_line_error(result)
    error = b'{"error": ' + b"[" * 1_000_000
    with StandIn(models_body=error, models_status=500) as s:
        with pytest.raises(ChinwagError, match=r"^server lab: HTTP 500: \{\"error\": \[\[\["):
            servers.fetch_model_ids(servers.Server("lab", s.url))


def test_a_model_list_sent_one_byte_at_a_time_meets_a_total_deadline():
    body = json.dumps({"data": [{"id": "chat"}]}).encode()  # 30 bytes at 0.5 s each: 15 s without a deadline
    with StandIn(models_body=body, models_drip_s=0.5) as s:
        started = time.monotonic()
        with pytest.raises(ChinwagError, match=r"^server lab: did not answer within 1\.5 s$"):
            servers.fetch_model_ids(servers.Server("lab", s.url), timeout=1.5)
        assert time.monotonic() - started < 10
        infos = servers.models_of(servers.Server("lab", s.url))  # the Model menu's default: LIST_TIMEOUT_S
    assert infos[0].status == "unusable" and f"within {errors.seconds(servers.LIST_TIMEOUT_S)}" in infos[0].reason


def keepalives_forever(comment: bytes, content_first: bool = False):
    def script(body, headers):
        if content_first:
            yield chunk("Started")
        for i in itertools.count(1):
            yield comment.replace(b"N", str(i).encode())
            time.sleep(0.02)

    return script


@pytest.mark.parametrize("comment", [b" \n", b": ping\n\n", b": keepalive 7/300\n\n"])
def test_keepalives_that_report_no_progress_do_not_hold_a_reply_forever(monkeypatch, comment):
    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 0.5)
    with StandIn(script=keepalives_forever(comment)) as s:
        result, took = chat_once(f"{s.url}#scripted")
    assert "sent only keepalives for 0.5 s" in one_line_error(result)
    assert took < WITHIN_S


def test_a_line_dripped_a_byte_at_a_time_is_named_for_what_it_is(monkeypatch):
    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 0.5)

    def drip(body, headers):
        yield b"data: "
        while True:
            yield b"x"
            time.sleep(0.02)

    with StandIn(script=drip) as s:
        result, took = chat_once(f"{s.url}#scripted")
    # it was called "only keepalives"
    assert "sent one line for 0.5 s without ending it (gave up waiting)" in one_line_error(result)
    assert took < WITHIN_S


def test_a_reply_then_only_keepalives_keeps_the_reply_and_names_the_figure(monkeypatch):
    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 0.5)
    with StandIn(script=keepalives_forever(b": ping\n\n", content_first=True)) as s:
        (text, stats), took = chat_once(f"{s.url}#scripted")
    assert text == "Started" and stats.finish_reason == "cancelled"
    assert stats.error.endswith("sent only keepalives for 0.5 s (gave up waiting)")
    assert took < WITHIN_S


def test_progress_that_never_becomes_a_reply_gives_up_after_the_prompt_deadline(monkeypatch):
    monkeypatch.setattr(errors, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(errors, "PROMPT_TIMEOUT_S", 1.0)
    with StandIn(script=keepalives_forever(b": keepalive N/1000000000\n\n")) as s:
        result, took = chat_once(f"{s.url}#scripted")
    assert "sent no reply within 1 s" in one_line_error(result)
    assert took < WITHIN_S


@pytest.mark.parametrize(
    "event",
    [
        {"choices": {"0": {"delta": {"content": "x"}}}},
        {"choices": ["text"]},
        {"choices": [{"delta": "text"}]},
        {"choices": [{"delta": {"tool_calls": {"index": 0}}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": [0]}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": "add"}]}}]},
    ],
)
def test_well_formed_json_of_the_wrong_shape_is_one_line_naming_the_server(event):
    with StandIn(script=lambda b, h: [f"data: {json.dumps(event)}\n\n".encode()]) as s:
        result, _ = chat_once(f"{s.url}#scripted")
    assert "sent a stream event of the wrong shape" in one_line_error(result)


def test_an_odd_finish_reason_or_usage_ends_the_reply_normally():
    events = [
        chunk("Hi"),
        b'data: {"choices": [{"delta": {}, "finish_reason": ["stop"]}]}\n\n',
        b'data: {"choices": [], "usage": {"prompt_tokens": "many", "prompt_tokens_details": [1]}}\n\n',
        b": keepalive 99999999999999999999999999/1\n\n",
        b"data: [DONE]\n\n",
    ]
    with StandIn(script=lambda b, h: events) as s:
        (text, stats), _ = chat_once(f"{s.url}#scripted")
    assert text == "Hi" and stats.finish_reason == "stop" and stats.error == ""


@pytest.mark.parametrize(
    "wbits, encoding", [(zlib.MAX_WBITS | 16, "gzip"), (zlib.MAX_WBITS, "deflate"), (-15, "deflate")]
)
def test_a_compressed_stream_is_read_as_any_other(wbits, encoding):
    z = zlib.compressobj(6, zlib.DEFLATED, wbits)
    body = z.compress(chunk("Hello") + chunk(" there") + chunk(finish="stop") + b"data: [DONE]\n\n") + z.flush()
    with StandIn(script=lambda b, h: [body[:7], body[7:]], stream_headers={"Content-Encoding": encoding}) as s:
        (text, stats), _ = chat_once(f"{s.url}#scripted")
        assert s.requests[0][0].endswith("/chat/completions")
    assert text == "Hello there" and stats.error == ""


def test_an_encoding_chinwag_does_not_read_or_a_damaged_body_is_one_line():
    with StandIn(script=lambda b, h: [b"\x1f\x8b not really gzip"], stream_headers={"Content-Encoding": "gzip"}) as s:
        result, _ = chat_once(f"{s.url}#scripted")
    assert "sent a damaged gzip body" in one_line_error(result)
    with StandIn(script=lambda b, h: [chunk("x")], stream_headers={"Content-Encoding": "br"}) as s:
        result, _ = chat_once(f"{s.url}#scripted")
    assert "in an encoding Chinwag does not read ('br')" in one_line_error(result)


def test_a_huge_error_body_from_a_chat_request_is_read_only_in_part(small_limits):
    error = json.dumps({"error": {"message": "boom " * 1_000_000}}).encode()  # 5 MB
    with StandIn(error_body=error) as s:
        tracemalloc.start()
        try:
            result, _ = chat_once(f"{s.url}#chat")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    message = one_line_error(result)
    assert ": HTTP 500: " in message and len(message) < 400
    assert peak < 4 << 20  # the 5 MB body was never held


def test_a_model_list_of_thousands_keeps_the_first_ones_and_no_huge_id():
    ids = ["x" * (servers.MAX_ID_CHARS + 1), ""] + [f"m{i}" for i in range(5000)]
    body = json.dumps({"data": [{"id": i} for i in ids]}).encode()
    with StandIn(models_body=body) as s:
        listed = servers.fetch_model_ids(servers.Server("lab", s.url))
    assert listed == [f"m{i}" for i in range(servers.MAX_MODELS)]
