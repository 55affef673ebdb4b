"""Every refusal over raw HTTP: an OpenAI-style error object, the right status, one log line, no traceback."""

import json

import httpx
import pytest

from app.cli.main import main
from app.server import limits

HELLO = [{"role": "user", "content": "Hello"}]


def post(url: str, body, path: str = "/chat/completions", **kw) -> httpx.Response:
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    return httpx.post(url + path, content=content, timeout=60, headers=headers, **kw)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert "Traceback" not in error["message"] and "\n" not in error["message"]
    return error


CASES = [
    (b"{not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not UTF-8"),
    ([1, 2], 400, "must be a JSON object"),
    ({}, 400, "messages: is required"),
    ({"messages": []}, 400, "is empty"),
    ({"messages": "hi"}, 400, "messages: is required"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "only text parts"),
    ({"messages": [{"role": "system", "content": "x"}]}, 400, "no user message"),
    ({"messages": HELLO, "n": 2}, 400, "cannot honour n=2"),
    ({"messages": HELLO, "logprobs": True}, 400, "logprobs"),
    ({"messages": HELLO, "presence_penalty": 0.5}, 400, "presence_penalty"),
    ({"messages": HELLO, "tools": [{"type": "function"}]}, 400, "tools[0]: must be"),
    ({"messages": HELLO, "tools": [{"type": "function", "function": {"name": ""}}]}, 400, "function.name"),
    ({"messages": HELLO, "tools": "add"}, 400, "tools: must be a list"),
    ({"messages": HELLO, "tool_choice": "required"}, 400, "tool_choice: forces a tool call, but no tools were given"),
    (
        {
            "messages": HELLO,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
        400,
        "names 'g', which is not among the tools given",
    ),
    ({"messages": HELLO, "response_format": {"type": "xml"}}, 400, "response_format: must be"),
    (
        {
            "messages": HELLO,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}},
        },
        400,
        'response_format.json_schema.schema: unsupported JSON schema: Unimplemented keys: ["not"]',
    ),
    ({"messages": HELLO, "functions": [{"name": "f"}]}, 400, "functions"),
    (
        {"messages": [*HELLO, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]},
        400,
        "tool_calls[0].function.arguments: must be the JSON text of an object",
    ),
    ({"messages": [*HELLO, {"role": "assistant", "tool_calls": "f"}]}, 400, "must be a list of tool calls"),
    ({"messages": HELLO, "temperature": "hot"}, 400, "temperature must be"),
    ({"messages": HELLO, "max_tokens": 0}, 400, "max_tokens must be an integer"),
    ({"messages": HELLO, "max_completion_tokens": 1.5}, 400, "max_completion_tokens must be"),
    ({"messages": HELLO, "stream": "yes"}, 400, "stream"),
    ({"messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, 400, "at most 4"),
    ({"messages": HELLO, "stop": [""]}, 400, "stop"),
    ({"messages": HELLO, "seed": -1}, 400, "seed must be an integer"),
    ({"messages": HELLO, "model": "no-such-model"}, 404, "does not exist"),
    ({"messages": HELLO, "model": "smollm2-135m-instruct"}, 404, "--allow-switch"),
    ({"messages": HELLO, "user": 7}, 400, "user"),
    ({"messages": HELLO, "user": "\ud800"}, 400, "user: holds a lone surrogate"),  # it was a bug, a 500
    # Python reads these; JSON has no such values (they reached tool schemas and the prompt as NaN).
    ('{"messages": [{"role": "user", "content": "Hello"}], "temperature": NaN}', 400, "NaN is not a JSON value"),
    ('{"messages": [{"role": "user", "content": "Hello"}], "seed": -Infinity}', 400, "-Infinity is not a JSON"),
    ('{"messages": [{"role": "user", "content": "Hello"}], "seed": ' + "1" * 5000 + "}", 400, "5000 digits"),
    (
        '{"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {"name": "f", '
        '"parameters": {"maximum": 1e999}}}]}',
        400,
        "the number 1e999 is out of range",
    ),
    ({"messages": [{"role": "user", "content": [[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]}]}, 400, "nested"),
]


def test_every_bad_request_gets_an_error_object(serve, caplog):
    s = serve()
    for body, status, words in CASES:
        assert words in error_of(post(s.url, body), status)["message"], body
    # Unknown fields are ignored.
    ok = post(s.url, {"messages": HELLO, "max_tokens": 2, "frobnicate": {"x": 1}, "n": 1, "logprobs": False})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    assert "prompt" in error_of(post(s.url, {"prompt": 3}, "/completions"), 400)["message"]
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert "tools are for" in error_of(post(s.url, {"prompt": "x", "tools": tools}, "/completions"), 400)["message"]
    assert error_of(httpx.get(s.url + "/nowhere"), 404)["type"] == "not_found_error"
    error_of(httpx.get(s.url + "/chat/completions"), 405)
    s.stop()
    lines = [r for r in caplog.records if r.name == "chinwag.server"]
    assert len(lines) == len(CASES) + 4 and not any(r.exc_info for r in lines)


def test_too_large_bodies_get_413(serve, monkeypatch):
    s = serve()
    big = json.dumps({"messages": [{"role": "user", "content": "x" * (limits.MAX_BODY_BYTES + 10)}]})
    assert "limit" in error_of(post(s.url, big), 413)["message"]

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(limits.MAX_BODY_BYTES // 65536 + 2):
            yield b" " * 65536

    headers = {"Content-Type": "application/json"}
    error_of(httpx.post(s.url + "/chat/completions", content=chunks(), headers=headers, timeout=60), 413)
    monkeypatch.setattr(limits, "MAX_MESSAGES", 2)
    from app.server import requests

    monkeypatch.setattr(requests, "MAX_MESSAGES", 2)
    assert "limit of 2" in error_of(post(s.url, {"messages": HELLO * 3}), 400)["message"]


def test_a_full_queue_gets_429(serve, monkeypatch):
    from app.server import service

    s = serve()
    monkeypatch.setattr(service, "MAX_WAITING", 0)
    assert error_of(post(s.url, {"messages": HELLO}), 429)["type"] == "rate_limit_error"


def test_the_api_key_is_required_on_every_route(serve):
    s = serve(api_key="k3y")
    assert error_of(httpx.get(s.url + "/models"), 401)["code"] == "invalid_api_key"
    error_of(post(s.url, {"messages": HELLO}, headers={"Authorization": "Bearer nope"}), 401)
    error_of(post(s.url, {"prompt": "x"}, "/completions", headers={"Authorization": "Basic k3y"}), 401)
    assert httpx.get(s.url + "/models", headers={"Authorization": "Bearer k3y"}).status_code == 200


def test_cors_is_off_unless_an_origin_is_named(serve):
    preflight = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    s = serve()
    r = httpx.options(s.url + "/chat/completions", headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    s2 = serve(cors_origins=("http://app.example",))
    r = httpx.options(s2.url + "/chat/completions", headers={**preflight, "Origin": "http://app.example"})
    assert r.headers["access-control-allow-origin"] == "http://app.example"
    r = httpx.options(s2.url + "/chat/completions", headers=preflight)
    assert r.headers.get("access-control-allow-origin") != "http://evil.example"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "::"])
def test_other_addresses_need_a_key(host, capsys):
    assert main(["serve", "--host", host]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "API key" in err


def test_a_taken_port_is_one_line(serve, capsys):
    s = serve()
    assert main(["serve", "--port", str(s.server.port), "--model", str(s.server.config.model)]) == 2
    assert "cannot listen on 127.0.0.1" in capsys.readouterr().err


def test_a_turn_that_fails_mid_stream_still_ends_with_an_error_a_finish_reason_and_done(serve, monkeypatch, caplog):
    from engine import Engine

    engine = Engine()
    running = serve(engine=engine)
    model = engine._local.session.model
    real, calls = type(model).__call__, []

    def failing(self, *args, **kwargs):  # a bug in the third forward pass: mid-reply
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a broken kernel")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "__call__", failing)
    body = {"messages": HELLO, "stream": True, "max_tokens": 8, "temperature": 0}
    with httpx.stream("POST", running.url + "/chat/completions", json=body, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    errors = [c["error"] for c in chunks if "error" in c]
    assert len(errors) == 1 and "a broken kernel" in errors[0]["message"] and "\n" not in errors[0]["message"]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert finishes[-1] == "error"


def test_tool_call_arguments_must_be_the_json_text_of_an_object(serve):
    s = serve()
    for arguments in ("NaN", "[1, 2]", '{"a": Infinity}', '"text"'):
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        messages = [*HELLO, {"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": "1"}]
        error = error_of(post(s.url, {"messages": messages, "max_tokens": 2}), 400)
        assert error["param"] == "messages[1].tool_calls[0].function.arguments", arguments
        assert "must be the JSON text of an object" in error["message"]


def test_numbers_given_as_text_are_refused(serve):
    s = serve()
    for field, value in (("max_tokens", "8"), ("max_completion_tokens", "8"), ("temperature", "0.5"), ("seed", "1")):
        error = error_of(post(s.url, {"messages": HELLO, field: value}), 400)
        assert error["param"] == field and "a JSON number, not text" in error["message"], field
