"""Concurrent requests through `chinwag serve` with the official openai client: batched, each reply as alone."""

from concurrent.futures import ThreadPoolExecutor

import openai

PROMPTS = [f"Client {i}: " + "tell me a story " * n for i, n in enumerate((1, 4, 12, 2))]


def ask(url: str, prompt: str) -> tuple[str, int]:
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    r = c.chat.completions.create(
        model="", messages=[{"role": "user", "content": prompt}], max_tokens=24, temperature=0
    )
    return r.choices[0].message.content, r.usage.completion_tokens


def test_concurrent_requests_decode_in_one_batch_and_reply_as_sequential_ones(serve):
    s = serve()
    sequential = [ask(s.url, p) for p in PROMPTS]
    batcher = s.server.engine._local.batcher
    batcher.peak_rows = 0
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        concurrent = list(pool.map(lambda p: ask(s.url, p), PROMPTS))
    assert batcher.peak_rows >= 2  # at least two decoded together
    assert concurrent == sequential
    assert all(n == 24 for _, n in concurrent)


def ask_messages(url: str, messages: list) -> tuple[str, int, int]:
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
    r = c.chat.completions.create(model="", messages=messages, max_tokens=24, temperature=0)
    return r.choices[0].message.content, r.usage.completion_tokens, r.usage.prompt_tokens_details.cached_tokens


def test_two_follow_ups_of_one_conversation_at_once_both_finish(serve):
    s = serve()
    first = [{"role": "user", "content": PROMPTS[1]}]
    reply = ask_messages(s.url, first)[0]
    follow = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}]
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda m: ask_messages(s.url, m), [follow, follow]))
    # Neither stopped the other's turn: one continued the conversation, the other began its own from the
    # shared prefix (its prompt holds the reply's text tokenized again, which the tiny model's text can change).
    assert [n for _, n, _ in both] == [24, 24]
    assert min(cached for _, _, cached in both) > 0
