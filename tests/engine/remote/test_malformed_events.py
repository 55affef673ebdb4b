"""Malformed server-sent events, re-tried on the landed code (issue 35 item 11): each is one line
naming the server, or read as the standard says; a reply cut short is kept and marked; nothing is
a bug and nothing is dropped without a word.

The stand-in (tests/remote_standin.py) plays the server on loopback.
"""

import json

import pytest

from engine.types import FinishReason
from tests.engine.remote.test_hostile_servers import chat_once, one_line_error
from tests.remote_standin import StandIn, chunk

DONE = b"data: [DONE]\n\n"


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


def event(delta: dict, finish=None) -> bytes:
    return f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta, 'finish_reason': finish}]})}\n\n".encode()


def usage(**counts) -> bytes:
    return f"data: {json.dumps({'choices': [], 'usage': counts})}\n\n".encode()


def served(events: list[bytes]):
    with StandIn(script=lambda body, headers: events) as s:
        result, _ = chat_once(f"{s.url}#scripted")
    return result


@pytest.mark.parametrize(
    "counts, prompt, generated",
    [
        ({"prompt_tokens": 10**400, "completion_tokens": 10**400}, 0, 1),  # past a float: was "a bug", exit 1
        ({"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 10**400}}, 5, 3),
        ({"prompt_tokens": 2**63, "completion_tokens": 2**64}, 0, 1),
        ({"prompt_tokens": True, "completion_tokens": True}, 0, 1),
    ],
    ids=["past a float", "cached past a float", "past 64 bits", "booleans"],
)
def test_token_counts_no_model_could_reach_are_not_counted_and_the_reply_stands(counts, prompt, generated):
    """A count that is not believable is not known (0; the pieces received count what was generated)."""
    text, stats = served([chunk("Hi"), usage(**counts), chunk(finish="stop"), DONE])
    assert text == "Hi" and stats.finish_reason == FinishReason.STOP and stats.error == ""
    assert (stats.prompt_tokens, stats.reused_tokens, stats.generated_tokens) == (prompt, 0, generated)
    assert type(stats.prompt_tokens) is int and type(stats.generated_tokens) is int


def test_a_byte_order_mark_before_the_first_event_is_read_past():
    """The event-stream standard drops one leading BOM; the reply's first piece was lost silently."""
    text, stats = served([b"\xef\xbb\xbf" + chunk("Hi"), chunk(" there"), chunk(finish="stop"), DONE])
    assert text == "Hi there" and stats.error == ""


@pytest.mark.parametrize("content", [5, {"text": "Hi"}, ["Hi"], [{"type": "image_url"}], True])
def test_content_that_is_not_text_is_one_line_not_an_empty_complete_reply(content):
    message = one_line_error(served([event({"content": content}), chunk(finish="stop"), DONE]))
    assert "sent a stream event of the wrong shape (a delta's 'content' is not text)" in message


def test_content_as_a_list_of_text_parts_is_read():
    parts = [{"type": "text", "text": "Hi"}, {"type": "text", "text": " there"}]
    text, stats = served([event({"content": parts}), chunk(finish="stop"), DONE])
    assert text == "Hi there" and stats.error == ""


def test_content_of_the_wrong_type_after_a_piece_keeps_the_piece_and_marks_it():
    text, stats = served([chunk("Partial"), event({"content": 7}), chunk(finish="stop"), DONE])
    assert text == "Partial" and stats.finish_reason == FinishReason.ERROR
    assert "a delta's 'content' is not text" in stats.error and stats.error.startswith("server 127.0.0.1:")


@pytest.mark.parametrize(
    "error_event, said",
    [
        (b'event: error\ndata: {"message": "the model crashed"}\n\n', "the model crashed"),
        (b'event: error\ndata: {"error": {"message": "overloaded"}}\n\n', "overloaded"),
        (b"event: error\ndata: upstream went away\n\n", "upstream went away"),
    ],
)
def test_an_error_event_says_what_the_server_said(error_event, said):
    """An `event: error` was read as an ordinary event without choices: its message was lost."""
    message = one_line_error(served([error_event]))
    assert message.endswith(f"failed mid-reply: {said}")
    text, stats = served([chunk("Partial"), error_event])
    assert text == "Partial" and stats.finish_reason == FinishReason.ERROR
    assert stats.error.endswith(f"failed mid-reply: {said}")


@pytest.mark.parametrize(
    "call",
    [
        5,
        {"index": 0, "id": "c", "function": {"name": 5, "arguments": "{}"}},
        {"index": 0, "id": "c", "function": {"name": "add", "arguments": 5}},
    ],
    ids=["a number", "a name that is a number", "arguments that are a number"],
)
def test_a_tool_call_of_the_wrong_shape_is_one_line(call):
    message = one_line_error(served([event({"tool_calls": [call]}), chunk(finish="tool_calls"), DONE]))
    assert "sent a stream event of the wrong shape" in message


@pytest.mark.parametrize("finish", ["tool_calls", "stop"])
@pytest.mark.parametrize("arguments", ["NaN", '{"a": NaN}', "[1, 2]", '{"a": 1,'], ids=str)
def test_tool_calls_that_end_without_a_json_object_are_one_line_not_a_silent_empty_reply(arguments, finish):
    call = {"index": 0, "id": "c", "function": {"name": "add", "arguments": arguments}}
    text, stats = served([event({"tool_calls": [call]}), chunk(finish=finish), DONE])
    assert text == "" and stats.tool_calls == () and stats.finish_reason == FinishReason.ERROR
    assert (
        stats.error.startswith("server 127.0.0.1:")
        and "a tool call to 'add' whose arguments are not a JSON object" in stats.error
    )


def test_a_page_of_html_with_status_200_says_it_is_not_an_event_stream():
    """A captive portal or a web page at the URL: it was "the stream ended without a reply"."""
    page = [b"<!DOCTYPE html>\n<html><body>Please log in</body></html>\n"]
    with StandIn(script=lambda b, h: page, stream_type="text/html; charset=utf-8") as s:
        result, _ = chat_once(f"{s.url}#scripted")
    assert one_line_error(result).endswith("answered with text/html, not an event stream (is it an OpenAI API?)")


def test_a_whole_reply_as_json_is_read_as_the_reply():
    """A server that ignores stream: true answers with one chat.completion object."""
    reply = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Whole\n\nreply"}, "finish_reason": "stop"}
        ]
    }
    body = json.dumps(reply, indent=2).encode()
    with StandIn(script=lambda b, h: [body], stream_type="application/json") as s:
        (text, stats), _ = chat_once(f"{s.url}#scripted")
    assert text == "Whole\n\nreply" and stats.finish_reason == FinishReason.STOP and stats.error == ""


@pytest.mark.parametrize(
    "answer, said",
    [
        (b"HTTP/1.1 abc OK\r\n\r\n", "sent a malformed HTTP response (illegal status line: "),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
            "sent a malformed HTTP response (illegal chunk",
        ),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + chunk("Hi"), "closed the connection mid-reply"),
    ],
    ids=["status line", "chunk header", "body cut short"],
)
def test_http_that_is_not_http_is_named_for_what_it_is(answer, said):
    """Every protocol error was "closed the connection mid-reply", even a reply that never began."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_once():
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 << 16)
            conn.sendall(answer)

    threading.Thread(target=answer_once, daemon=True).start()
    try:
        result, _ = chat_once(f"http://127.0.0.1:{listener.getsockname()[1]}/v1#m")
    finally:
        listener.close()
    if isinstance(result, tuple):  # the reply began: kept, marked
        assert result[0] == "Hi" and said in result[1].error
    else:
        assert said in one_line_error(result)


def test_an_event_stream_labelled_json_is_still_read_as_one():
    with StandIn(
        script=lambda b, h: [chunk("Hi"), chunk(" there"), chunk(finish="stop"), DONE], stream_type="application/json"
    ) as s:
        (text, stats), _ = chat_once(f"{s.url}#scripted")
    assert text == "Hi there" and stats.error == ""


@pytest.mark.parametrize("arguments", ['{"a": "\\ud800"}', {"a": "\ud800"}], ids=["text", "object"])
def test_a_lone_surrogate_in_tool_call_arguments_is_replaced_as_in_content(arguments):
    """As in content, JSON's "\\ud800" (no UTF-8 holds it) becomes U+FFFD: the store, a tool server
    and the next request all encode the arguments."""
    call = {"index": 0, "id": "c", "function": {"name": "add", "arguments": arguments}}
    _, stats = served([event({"tool_calls": [call]}), chunk(finish="tool_calls"), DONE])
    (made,) = stats.tool_calls
    assert json.loads(made.arguments) == {"a": "\ufffd"}
    made.arguments.encode()


@pytest.mark.parametrize(
    "error_event",
    [
        b'data: {"error": {"message": "bad \\ud800 thing"}}\n\n',
        b'event: error\ndata: {"message": "bad \\udfff thing"}\n\n',
    ],
    ids=["error object", "error event"],
)
def test_a_lone_surrogate_in_a_servers_error_message_is_replaced(error_event):
    """It reached the store and the terminal as a string no UTF-8 holds: `chinwag chat` ended as a
    bug (exit 1) and lost the reply it had."""
    message = one_line_error(served([error_event]))
    assert message.endswith("failed mid-reply: bad \ufffd thing")
    text, stats = served([chunk("Hi"), error_event])
    assert text == "Hi" and stats.error.endswith("failed mid-reply: bad \ufffd thing")
    stats.error.encode()
