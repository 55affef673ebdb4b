"""A client that goes away mid-stream, a restart that keeps the caches, Chinwag's own remote backend as a client."""

import asyncio
import json

import httpx
import openai
import pytest

from app.server.conversations import FILE_NAME


def ask(url: str, messages: list, max_tokens: int = 4, **kw):
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    return c.chat.completions.create(model="", messages=messages, max_tokens=max_tokens, temperature=0, **kw)


@pytest.fixture(scope="module")
def long_context_model(tmp_path_factory):
    """The tiny model with room for a reply far longer than the test waits for."""
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("long-tiny"), context_length=200_000)


def test_a_client_that_disconnects_stops_its_turn_and_frees_the_queue(serve, long_context_model):
    s = serve(model=str(long_context_model))
    messages = [{"role": "user", "content": "Tell me a story about a cat and a long journey."}]
    with httpx.stream(
        "POST",
        s.url + "/chat/completions",
        json={"messages": messages, "max_tokens": 40_000, "stream": True, "temperature": 0},
        timeout=60,
    ) as r:
        lines = r.iter_lines()
        received = [next(lines) for _ in range(6)]  # a few tokens, then hang up
    assert any(line.startswith("data: {") for line in received)
    # The next request is served (the queue was freed) and the stopped turn is recorded as such.
    after = ask(s.url, [{"role": "user", "content": "Hello"}])
    assert after.usage.completion_tokens == 4
    records = list(s.server.service.recent)
    assert records[0].finish_reason == "cancelled" and 0 < records[0].completion_tokens < 40_000
    # The stopped chat's cache is consistent: resending it reuses the prompt and answers normally.
    again = ask(s.url, messages)
    assert again.choices[0].finish_reason == "length"
    assert 0 < again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens


def test_a_restart_keeps_the_cached_tokens(serve, chinwag_home):
    s = serve()
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    for turn in range(2):
        reply = ask(s.url, messages).choices[0].message.content
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"Turn {turn}?"}]
    s.stop()
    saved = json.loads((chinwag_home / FILE_NAME).read_text())
    assert len(saved["conversations"]) == 1
    assert "capital" not in (chinwag_home / FILE_NAME).read_text()  # digests, never the text
    s2 = serve()
    follow_up = ask(s2.url, messages)
    assert follow_up.usage.prompt_tokens_details.cached_tokens > len(messages)  # more than a token a message
    # An unrelated chat shares nothing.
    assert ask(s2.url, [{"role": "user", "content": "Hello"}]).usage.prompt_tokens_details.cached_tokens == 0


def test_chinwag_remote_backend_chats_through_the_server(serve):
    from engine import Engine, GenerationParams, TextDelta, TurnStats

    s = serve()

    async def three_turns():
        engine = Engine()
        try:
            await engine.save_server("local", s.url)
            ids = [m.id for m in await engine.list_models() if m.server == "local"]
            assert ids and ids[0].startswith("local/")
            await engine.load_model(ids[0])
            messages, cached = [], []
            for turn in range(3):
                messages.append({"role": "user", "content": f"Turn {turn}: tell me a story"})
                parts, stats = [], None
                async for ev in engine.chat("c1", messages, GenerationParams(max_tokens=4, temperature=0)):
                    if isinstance(ev, TextDelta):
                        parts.append(ev.text)
                    elif isinstance(ev, TurnStats):
                        stats = ev
                assert stats is not None and stats.finish_reason == "length", stats
                cached.append(stats.reused_tokens)
                messages.append({"role": "assistant", "content": "".join(parts)})
            return cached
        finally:
            await engine.close()

    cached = asyncio.run(three_turns())
    assert cached[0] == 0 and cached[1] > 0 and cached[2] > cached[1]
