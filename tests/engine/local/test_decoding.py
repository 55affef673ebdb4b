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
