"""The official openai client against `chinwag serve` on the tiny model."""

import openai
import pytest


def client(url: str, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=kw.pop("api_key", "none"), max_retries=0, timeout=120, **kw)


def test_models_lists_the_loaded_model_first(serve, tiny_model_path):
    s = serve()
    ids = [m.id for m in client(s.url).models.list()]
    assert ids[0] == tiny_model_path.name  # a folder by its name: never where it is
    assert "smollm2-135m-instruct" in ids  # the ids of `chinwag models --json`


def test_chat_whole_then_follow_up_reuses_the_cache(serve):
    s = serve()
    c = client(s.url)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story"}]
    first = c.chat.completions.create(model="", messages=messages, max_tokens=6, temperature=0)
    reply = first.choices[0].message.content
    assert first.usage.completion_tokens == 6 and first.choices[0].finish_reason == "length"
    assert first.usage.prompt_tokens > 0 and first.usage.prompt_tokens_details.cached_tokens == 0
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    second = c.chat.completions.create(model="", messages=messages, max_tokens=4, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens < cached < second.usage.prompt_tokens
    records = list(s.server.service.recent)
    assert [r.cached_tokens for r in records] == [0, cached]


def test_streaming_with_usage_matches_the_whole_reply(serve):
    s = serve()
    c = client(s.url)
    messages = [{"role": "user", "content": "Hello, how are you today?"}]
    whole = c.chat.completions.create(model="", messages=messages, max_tokens=8, temperature=0, seed=1)
    chunks = list(
        c.chat.completions.create(
            model="",
            messages=messages,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content  # greedy: the same ids, fresh or not
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 8 and chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_stop_sequence_cuts_the_reply(serve):
    s = serve()
    c = client(s.url)
    messages = [{"role": "user", "content": "Numbers 0 1 2 3"}]
    full = c.chat.completions.create(model="", messages=messages, max_tokens=12, temperature=0).choices[0]
    text = full.message.content
    if len(text.strip()) < 4:
        pytest.skip("the tiny model's reply is too short to cut")
    stop = text[2:4]
    cut = c.chat.completions.create(model="", messages=messages, max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = c.chat.completions.create(
        model="", messages=messages, max_tokens=12, temperature=0, stop=stop, stream=True
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices) == text[: text.index(stop)]


def test_completions_endpoint(serve):
    s = serve()
    done = client(s.url).completions.create(model="", prompt="The capital of France", max_tokens=5, temperature=0)
    assert done.usage.completion_tokens == 5 and isinstance(done.choices[0].text, str)


def test_pinned_conversation_and_api_key(serve):
    s = serve(api_key="sekrit")
    with pytest.raises(openai.AuthenticationError):
        client(s.url, api_key="wrong").models.list()
    c = client(s.url, api_key="sekrit")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    c.chat.completions.create(model="", messages=messages, max_tokens=3, temperature=0, user="alice")
    # Pinned: the same conversation even though the reply was not sent back.
    again = c.chat.completions.create(
        model="", messages=messages + [{"role": "user", "content": "Paris?"}], max_tokens=3, user="alice"
    )
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_three_clients_at_once_are_all_served(serve):
    from concurrent.futures import ThreadPoolExecutor

    s = serve()

    def conversation(i: int) -> list:
        c = client(s.url)
        messages, cached = [{"role": "user", "content": f"Client {i}: tell me a story"}], []
        for turn in range(2):
            r = c.chat.completions.create(model="", messages=messages, max_tokens=4, temperature=0)
            cached.append(r.usage.prompt_tokens_details.cached_tokens)
            messages += [{"role": "assistant", "content": r.choices[0].message.content}]
            messages += [{"role": "user", "content": f"turn {turn}"}]
        return cached

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(conversation, range(3)))
    assert all(c[0] == 0 and c[1] > 0 for c in results), results


def test_allow_switch_loads_the_model_a_request_names(serve, tmp_path):
    from engine.models import registry
    from tests.tiny_model import build_tiny_model

    registry.add_model_folder(str(build_tiny_model(tmp_path / "other-tiny", seed=1)))
    s = serve(allow_switch=True)
    done = client(s.url).chat.completions.create(
        model="other-tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=2
    )
    assert done.model == "other-tiny"  # the folder's name, not its path
    assert [m.id for m in client(s.url).models.list()][0] == "other-tiny"


def test_max_completion_tokens_is_honoured_and_wins_over_max_tokens(serve):
    s = serve()
    c = client(s.url)
    messages = [{"role": "user", "content": "Tell me a story"}]
    reply = c.chat.completions.create(model="", messages=messages, max_completion_tokens=3, temperature=0)
    assert reply.usage.completion_tokens == 3 and reply.choices[0].finish_reason == "length"
    both = c.chat.completions.create(model="", messages=messages, max_tokens=7, max_completion_tokens=2, temperature=0)
    assert both.usage.completion_tokens == 2
