"""ContiguousAttentionKVCache: growth on both write paths, trims, and equality with mlx-lm."""

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.context.kv_cache import ContiguousAttentionKVCache

HEADS, DIM = 2, 8


def token(i, n=1):
    """Keys whose every element encodes the token's position, so misplacement shows."""
    pos = mx.arange(i, i + n, dtype=mx.float32).reshape(1, 1, n, 1)
    return mx.broadcast_to(pos, (1, HEADS, n, DIM)), mx.broadcast_to(-pos, (1, HEADS, n, DIM))


def test_mlx_drops_writes_past_the_end_silently():
    # Why the cache must grow before writing: MLX neither raises nor writes.
    buf = mx.zeros((1, 4))
    buf[:, 4:5] = mx.ones((1, 1))
    mx.eval(buf)
    assert buf.shape == (1, 4) and buf.sum().item() == 0


def test_seed_write_token_past_capacity_keeps_every_token():
    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=4, dtype=mx.float32)
    for i in range(2 * 4 + 1):
        cache.write_token(*token(i))
    keys, values = cache.get_kv()
    mx.eval(keys, values)
    assert cache.offset == 9 and keys.shape == (1, HEADS, 9, DIM)
    assert cache.max_seq_len == 16
    np.testing.assert_array_equal(np.array(keys[0, 0, :, 0]), np.arange(9))
    np.testing.assert_array_equal(np.array(values[0, 1, :, 3]), -np.arange(9))


def test_update_and_fetch_single_tokens_use_write_token(monkeypatch):
    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=2, dtype=mx.float32)
    calls = []
    original = ContiguousAttentionKVCache.write_token
    monkeypatch.setattr(
        ContiguousAttentionKVCache, "write_token", lambda self, k, v: calls.append(1) or original(self, k, v)
    )
    cache.update_and_fetch(*token(0, 3))
    cache.update_and_fetch(*token(3))
    assert calls == [1] and cache.offset == 4


def test_prefill_longer_than_capacity_grows_by_doubling():
    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=4, dtype=mx.float32)
    keys, _ = cache.update_and_fetch(*token(0, 13))
    assert cache.max_seq_len == 16 and keys.shape[2] == 13
    np.testing.assert_array_equal(np.array(keys[0, 1, :, 7]), np.arange(13))


def test_no_bits_attribute_so_mlx_lm_uses_plain_attention():
    assert not hasattr(ContiguousAttentionKVCache(HEADS, DIM, 4), "bits")


def test_rejects_empty_capacity():
    with pytest.raises(ValueError):
        ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=0)


def test_empty_cache_takes_the_model_dtype():
    cache = ContiguousAttentionKVCache(HEADS, DIM, 4)  # float16 by default
    cache.update_and_fetch(*token(0, 2))
    assert cache.keys.dtype == mx.float32


ops = st.lists(
    st.one_of(
        st.tuples(st.just("prefill"), st.integers(2, 9)),
        st.tuples(st.just("decode"), st.integers(1, 6)),
        st.tuples(st.just("trim"), st.integers(0, 7)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(initial=st.integers(1, 8), ops=ops)
def test_interleaved_growth_and_trims_match_a_reference_concatenation(initial, ops):
    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=initial, dtype=mx.float32)
    ref_k = np.zeros((1, HEADS, 0, DIM), np.float32)
    ref_v = ref_k.copy()
    rng = np.random.default_rng(len(ops))
    for op, n in ops:
        if op == "trim":
            dropped = cache.trim(n)
            assert dropped == min(n, ref_k.shape[2])
            ref_k, ref_v = ref_k[:, :, : ref_k.shape[2] - dropped], ref_v[:, :, : ref_v.shape[2] - dropped]
            continue
        for _ in range(n if op == "decode" else 1):
            length = 1 if op == "decode" else n
            k = rng.standard_normal((1, HEADS, length, DIM)).astype(np.float32)
            v = rng.standard_normal((1, HEADS, length, DIM)).astype(np.float32)
            if op == "decode":
                cache.write_token(mx.array(k), mx.array(v))
            else:
                cache.update_and_fetch(mx.array(k), mx.array(v))
            ref_k, ref_v = np.concatenate([ref_k, k], 2), np.concatenate([ref_v, v], 2)
        assert cache.max_seq_len <= max(initial, 2 * cache.peak)
    keys, values = cache.get_kv()
    assert cache.offset == ref_k.shape[2]
    np.testing.assert_array_equal(np.array(keys), ref_k)
    np.testing.assert_array_equal(np.array(values), ref_v)


def test_state_round_trip_keeps_tokens_and_can_reserve():
    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=4, dtype=mx.float32)
    cache.update_and_fetch(*token(0, 6))
    restored = ContiguousAttentionKVCache.from_state(cache.state, max_seq_len=32)
    assert restored.offset == 6 and restored.max_seq_len == 32  # reserved as asked, not doubled
    restored.write_token(*token(6))
    keys, _ = restored.get_kv()
    np.testing.assert_array_equal(np.array(keys[0, 0, :, 0]), np.arange(7))


def test_model_logits_equal_mlx_lm_kvcache_across_growths(tiny_model):
    from mlx_lm.models.cache import KVCache

    model, _ = tiny_model
    layers = model.layers
    attn = layers[0].self_attn
    ours = [ContiguousAttentionKVCache(attn.n_kv_heads, attn.head_dim, max_seq_len=4) for _ in layers]
    theirs = [KVCache() for _ in layers]
    rng = np.random.default_rng(0)
    prompt = mx.array(rng.integers(3, 300, size=(1, 7)))
    a, b = model(prompt, cache=ours), model(prompt, cache=theirs)
    np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-4)
    # Decode 40 tokens one by one: the cache grows 4 -> 8 -> 16 -> 32 -> 64.
    tok = mx.argmax(a[:, -1:], axis=-1)
    for step in range(40):
        a, b = model(tok, cache=ours), model(tok, cache=theirs)
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        tok = mx.argmax(a[:, -1:], axis=-1)
        if step == 20:  # a prefill chunk in the middle of decoding
            chunk = mx.array(rng.integers(3, 300, size=(1, 5)))
            a, b = model(chunk, cache=ours), model(chunk, cache=theirs)
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-4)
            tok = mx.argmax(a[:, -1:], axis=-1)
    assert ours[0].offset == theirs[0].offset == 7 + 40 + 5
    assert ours[0].max_seq_len == 64


# --- mlx-lm's prompt-cache protocol (its tests/test_prompt_cache.py, on this cache) --------


def filled(n, capacity=4, layers=1):
    caches = [ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=capacity, dtype=mx.float32) for _ in range(layers)]
    for c in caches:
        c.update_and_fetch(*token(0, n))
    return caches


def test_deep_copy_is_independent_of_later_writes_and_trims():
    import copy

    from mlx_lm.models.cache import trim_prompt_cache

    cache = filled(10)
    y = token(10)
    cache[0].update_and_fetch(*y)
    old = copy.deepcopy(cache)
    assert trim_prompt_cache(cache, 1) == 1
    assert old[0].offset == 11 and cache[0].offset == 10
    z = (y[0] + 100, y[1] - 100)
    cache[0].update_and_fetch(*z)
    assert mx.array_equal(old[0].keys[..., 10:11, :], y[0])
    assert mx.array_equal(cache[0].keys[..., 10:11, :], z[0])
    # Cheap: the copy holds the valid prefix, not the 16 positions of spare capacity.
    assert old[0].max_seq_len == 11 < cache[0].max_seq_len
    old[0].update_and_fetch(*token(11, 3))  # and it grows like any other
    assert old[0].offset == 14
    np.testing.assert_array_equal(np.array(old[0].get_kv()[0][0, 0, :, 0]), np.arange(14))


def test_deep_copy_and_pickle_keep_the_dtype():
    import copy
    import pickle

    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=4)
    cache.update_and_fetch(*token(0, 2))
    assert copy.deepcopy(cache).dtype == mx.float32
    assert "dtype" not in vars(cache)
    again = pickle.loads(pickle.dumps(cache))
    assert again.offset == 2 and mx.array_equal(again.get_kv()[0], cache.get_kv()[0])


def test_trim_counts_like_mlx_lm():
    from mlx_lm.models.cache import trim_prompt_cache

    cache = filled(10, layers=2)
    assert trim_prompt_cache(cache, 7) == 7
    assert trim_prompt_cache(cache, 4) == 3
    assert all(c.offset == 0 for c in cache)


def test_masks_with_a_cache_match_mlx_lm():
    from mlx_lm.models.base import create_attention_mask, create_causal_mask
    from mlx_lm.models.cache import KVCache

    cache = ContiguousAttentionKVCache(HEADS, DIM, max_seq_len=4, dtype=mx.float32)
    assert create_attention_mask(mx.zeros((1, 4)), cache=cache, return_array=False) == "causal"
    assert mx.array_equal(
        create_attention_mask(mx.zeros((1, 4)), cache=cache, return_array=True), create_causal_mask(4)
    )
    cache.update_and_fetch(mx.zeros((1, 2, 16, 8)), mx.zeros((1, 2, 16, 8)))
    ours = create_attention_mask(mx.zeros((1, 4)), cache=cache, return_array=True)
    reference = KVCache()
    reference.update_and_fetch(mx.zeros((1, 2, 16, 8)), mx.zeros((1, 2, 16, 8)))
    assert ours.shape == (4, 20)
    assert mx.array_equal(ours, create_attention_mask(mx.zeros((1, 4)), cache=reference, return_array=True))
    assert create_attention_mask(mx.zeros((1, 1)), cache=cache) is None


def test_save_load_round_trip_with_mlx_lm_keeps_metadata_offsets_and_states(tmp_path):
    from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache

    cache = filled(10, layers=4)
    path = str(tmp_path / "prompt_cache.safetensors")
    save_prompt_cache(path, cache, {"a": "b", "c": "d"})
    loaded, metadata = load_prompt_cache(path, return_metadata=True)
    assert metadata == {"a": "b", "c": "d"}
    assert len(loaded) == 4 and all(type(c) is ContiguousAttentionKVCache for c in loaded)
    for c, lc in zip(cache, loaded):
        assert c.offset == lc.offset == 10
        assert mx.array_equal(c.state[0], lc.state[0]) and mx.array_equal(c.state[1], lc.state[1])
        # Both keep working the same way after the round trip.
        k, _ = c.update_and_fetch(*token(10))
        lk, _ = lc.update_and_fetch(*token(10))
        assert mx.array_equal(k, lk)
