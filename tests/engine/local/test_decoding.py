"""engine/local/decoding.py: plain decoding's generator, mlx-lm's greedy tokens, the cache exact after each."""

import mlx.core as mx

from engine.context.conversation import ConversationCache
from engine.local.decoding import TokenSampler, generate_step
from engine.local.generation import prefill
from engine.types import GenerationParams
from tests.engine.test_api import reference


def test_each_token_yielded_is_mlx_lms_and_is_in_the_cache(tiny_model):
    model, tokenizer = tiny_model
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}], add_generation_prompt=True)
    conv = ConversationCache.create(model, 16)
    logits, _, _ = prefill(model, conv, list(prompt))
    sampling = TokenSampler(GenerationParams(temperature=0.0), list(prompt))
    tokens = generate_step(model, conv, sampling.sample(logits), sampling)
    got = []
    for tok in tokens:
        got.append(tok)
        assert conv.token_ids == list(prompt) + got  # yielded: in the cache, nothing after it
        assert all(c.offset == len(conv.token_ids) for c in conv.layers)
        if len(got) == 12:
            break
    tokens.close()
    assert got == reference(model, list(prompt), 12, set())


def test_the_repetition_history_follows_the_tokens_fed():
    sampling = TokenSampler(GenerationParams(repetition_penalty=1.3), list(range(100)))
    assert sampling.history.tolist() == list(range(36, 100))
    sampling.saw(mx.array([7, 8]))
    assert sampling.history.tolist() == list(range(38, 100)) + [7, 8]
    plain = TokenSampler(GenerationParams(), list(range(100)))
    plain.saw(mx.array([7]))
    assert plain.history is None  # nothing reads it without a logits processor


def _sampled_reply(path, top_k, speculative):
    import asyncio

    from engine import Engine, TurnStats

    async def body():
        engine = Engine()
        try:
            await engine.load_model(str(path))
            params = GenerationParams(temperature=1.0, top_k=top_k, max_tokens=6, seed=7, speculative=speculative)
            events = [ev async for ev in engine.chat("k", [{"role": "user", "content": "hello there"}], params)]
        finally:
            await engine.close()
        stats = events[-1]
        assert isinstance(stats, TurnStats)
        return stats

    return asyncio.run(body())


def test_a_top_k_past_the_vocabulary_keeps_every_token_on_either_path(tiny_model_path, tiny_model):
    """The settings allow top_k up to 1000; the tiny vocabulary has 400 tokens (mlx-lm refuses k >= it)."""
    width = tiny_model[0](mx.array([[1]])).shape[-1]
    for speculative in (False, True):
        every = _sampled_reply(tiny_model_path, 0, speculative)
        for k in (width, 1000):
            stats = _sampled_reply(tiny_model_path, k, speculative)
            assert stats.error == "" and stats.reply_ids == every.reply_ids
