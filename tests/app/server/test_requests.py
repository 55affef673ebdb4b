"""The request parsers give the engine's typed messages: one ChatMessage and ToolCall shape for both wires."""

import hashlib
import json

import pytest

from app.server.anthropic_requests import messages_request
from app.server.conversations import digest
from app.server.errors import ApiError
from app.server.requests import chat_request, completion_request
from app.server.service import ChatService, StopScanner
from engine.types import ChatMessage, Role, ToolCall
from tests.app_helpers import FakeEngine

CALL = ToolCall("call_1", "add", '{"a": 2, "b": 3}')
# The same turn on each wire: a question, the model's call, the tool's answer.
OPENAI = [
    {"role": "developer", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "2+3?"}]},
    {"role": "assistant", "content": None, "tool_calls": [CALL.to_openai()]},
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
]
ANTHROPIC = [
    {"role": "user", "content": "2+3?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2, "b": 3}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "5"}]},
]
TYPED = (
    ChatMessage(Role.SYSTEM, "Be brief."),
    ChatMessage(Role.USER, "2+3?"),
    ChatMessage(Role.ASSISTANT, "", (CALL,)),
    ChatMessage(Role.TOOL, "5", tool_call_id="call_1"),
)


def test_both_wires_parse_to_the_same_typed_messages() -> None:
    assert chat_request({"messages": OPENAI}).messages == TYPED
    assert messages_request({"system": "Be brief.", "messages": ANTHROPIC, "max_tokens": 8}).messages == TYPED
    assert completion_request({"prompt": "Once"}).messages == (ChatMessage(Role.USER, "Once"),)


def test_tool_calls_go_back_in_the_model_s_text() -> None:
    service = ChatService(FakeEngine())  # type: ignore[arg-type]
    hermes = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    assert service.written_back(TYPED)[2] == ChatMessage(Role.ASSISTANT, hermes)  # a call made elsewhere
    service.tool_replies[("call_1",)] = "<exact markup/>"  # one this server made: its text as generated
    assert service.written_back(TYPED)[2] == ChatMessage(Role.ASSISTANT, "<exact markup/>")
    assert service.written_back(TYPED)[3] == TYPED[3]


def test_a_route_digest_is_the_one_saved_maps_hold() -> None:
    """server_conversations.json keeps these digests across releases: the same text, the same digest."""
    old = hashlib.sha256(json.dumps(["user", "2+3?"]).encode()).hexdigest()[:32]
    assert digest(TYPED[1]) == old


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([{"role": "assistant", "content": "", "tool_calls": [{"id": "x"}]}, {"role": "user", "content": "?"}],
         "messages[0].tool_calls[0]: must be {'id', 'type': 'function'"),
        ([{"role": "assistant", "content": "", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "[1]"}}]},
          {"role": "user", "content": "?"}],
         "messages[0].tool_calls[0].function.arguments: must be the JSON text of an object"),
        ([{"role": "system", "content": "s"}], "messages: has no user message"),
    ],
)  # fmt: skip
def test_a_bad_message_is_a_400_naming_its_place(messages: list[object], error: str) -> None:
    with pytest.raises(ApiError) as raised:
        chat_request({"messages": messages})
    assert raised.value.status == 400 and str(raised.value).startswith(error)


HI = [{"role": "user", "content": "hi"}]
CALL_BACK = {"role": "assistant", "content": "x"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"messages": HI, "stream_options": []}, "stream_options: must be an object"),
        ({"messages": HI, "stream_options": 0}, "stream_options: must be an object"),
        ({"messages": HI, "user": False}, "user: must be a string"),
        ({"messages": HI, "user": 0}, "user: must be a string"),
        ({"messages": HI, "user": "\udc00"}, "user: holds a lone surrogate"),
        ({"messages": HI, "tools": "x", "tool_choice": "none"}, "tools: must be a list"),
        ({"messages": HI, "tools": [1], "tool_choice": "none"}, "tools[0]: must be"),
        ({"messages": [*HI, {**CALL_BACK, "tool_calls": {}}]}, "messages[1].tool_calls: must be a list"),
        ({"messages": [*HI, {**CALL_BACK, "tool_calls": 0}]}, "messages[1].tool_calls: must be a list"),
        ({"messages": [*HI, {**CALL_BACK, "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]}]},
         "messages[1].tool_calls[0]: must be"),
        ({"messages": [*HI, {"role": "tool", "content": "1", "tool_call_id": 5}]}, "messages[1].tool_call_id: must be a string"),
    ],
)  # fmt: skip
def test_a_wrong_type_the_falsy_way_is_a_400_too(body: dict[str, object], error: str) -> None:
    """0, false, [] and {} where an object, a string or a list goes were taken for "not given"."""
    with pytest.raises(ApiError) as raised:
        chat_request(body)
    assert raised.value.status == 400 and str(raised.value).startswith(error), str(raised.value)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"system": 0}, "system: must be a string or a list of text blocks"),
        ({"system": False}, "system: must be a string or a list of text blocks"),
        ({"tools": "x", "tool_choice": {"type": "none"}}, "tools: must be a list"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "1",
                                                    "is_error": "yes"}]}]}, "messages[0].content[0].is_error: must be"),
    ],
)  # fmt: skip
def test_an_anthropic_wrong_type_the_falsy_way_is_a_400_too(body: dict[str, object], error: str) -> None:
    with pytest.raises(ApiError) as raised:
        messages_request({"messages": HI, "max_tokens": 8, **body})
    assert raised.value.status == 400 and str(raised.value).startswith(error), str(raised.value)


def test_a_stop_sequence_past_the_limit_is_a_400() -> None:
    """A 2 MB stop sequence was searched on every token: minutes each, on the server's loop."""
    for body, param in ((chat_request, "stop"), (lambda b: messages_request({**b, "max_tokens": 8}), "stop_sequences")):
        with pytest.raises(ApiError) as raised:
            body({"messages": HI, param: ["x" * 1001]})
        assert str(raised.value) == f"{param}: a stop sequence holds 1001 characters, more than the limit of 1000"
    assert chat_request({"messages": HI, "stop": "x" * 1000}).stop == ("x" * 1000,)


def test_the_stop_scanner_holds_back_only_what_may_begin_a_stop() -> None:
    scanner = StopScanner(("END!", "xyz"))
    assert scanner.feed("abc EN") == "abc "  # "EN" may begin END!
    assert scanner.feed("D") == ""
    assert scanner.feed(" x") == "END "  # not END!: out; "x" may begin xyz
    assert scanner.feed("yzzz") == "" and scanner.matched == "xyz"
    long = StopScanner(("a" * 1000,))
    assert long.feed("b" + "a" * 999) == "b" and long.feed("a") == "" and long.matched == "a" * 1000
