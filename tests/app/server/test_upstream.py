"""chinwag serve in front of a server elsewhere (its model a saved server's): when that server fails,
the API client hears a bad gateway (502) or a failed reply, never a clean "stop" or its own mistake."""

import json

import anthropic
import httpx
import openai
import pytest

from tests.remote_standin import StandIn, chunk


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)


@pytest.fixture
def standin():
    with StandIn() as s:
        yield s


def _model(running) -> str:
    return _client(running.url).models.list().data[0].id


def test_a_server_elsewhere_failing_before_a_reply_is_a_bad_gateway(serve, standin):
    running = serve(model=f"{standin.url}#error-500")
    with pytest.raises(openai.APIStatusError) as failed:
        _client(running.url).chat.completions.create(
            model=_model(running), messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert failed.value.status_code == 502 and "the GPU caught fire" in failed.value.message


def test_the_anthropic_route_says_bad_gateway_too(serve, standin):
    running = serve(model=f"{standin.url}#error-500")
    client = anthropic.Anthropic(base_url=running.url.removesuffix("/v1"), api_key="none", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as failed:
        client.messages.create(model=_model(running), max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 502 and failed.value.body["error"]["type"] == "api_error"


def _cut_short(body, headers):
    yield chunk("Half a")
    yield chunk(" reply")  # and the stream ends: no finish_reason, no [DONE]


def test_a_reply_cut_short_elsewhere_is_a_bad_gateway_not_a_clean_stop():
    from app.server.http import ServerConfig
    from tests.app.server.conftest import start_server

    with StandIn(script=_cut_short) as s:
        running = start_server(ServerConfig(port=0, model=f"{s.url}#scripted"))
        try:
            with pytest.raises(openai.APIStatusError) as failed:
                _client(running.url).chat.completions.create(
                    model=_model(running), messages=[{"role": "user", "content": "hi"}], max_tokens=8
                )
            assert failed.value.status_code == 502 and "before the reply finished" in failed.value.message
            body = {"model": _model(running), "messages": [{"role": "user", "content": "hi"}], "stream": True}
            with httpx.stream("POST", running.url + "/chat/completions", json=body, timeout=60) as r:
                events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        finally:
            running.stop()
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")) == "Half a reply"
    assert reasons[-1] == "error" and "stop" not in reasons
    assert any("error" in c and "before the reply finished" in c["error"]["message"] for c in chunks)
    assert events[-1] == "[DONE]"
