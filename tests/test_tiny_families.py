"""The tiny models of every family (tests/tiny_families.py) are fit to test cache handling on."""

import random

import pytest

from tests.tiny_families import (
    CACHE_KINDS,
    FAMILIES,
    LATENT,
    RECURRENT,
    WINDOW,
    WINDOWED,
    family_model_path,
)

_LOADED: dict = {}


def _load(tmp_path_factory, family):
    """(model, tokenizer) of the family's tiny model, through mlx_lm.load, once per session."""
    import mlx_lm

    if family not in _LOADED:
        _LOADED[family] = mlx_lm.load(str(family_model_path(tmp_path_factory, family)))
    return _LOADED[family]


def _prompt(n: int, seed: int = 0) -> list[int]:
    """n token ids, none of them a special token (ids 0-2)."""
    rng = random.Random(seed)
    return [rng.randrange(3, 400) for _ in range(n)]


def _other_first(prompt: list[int]) -> list[int]:
    return [3 + (prompt[0] - 3 + 100) % 397, *prompt[1:]]


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    return [int(token) for token, _ in generate_step(mx.array(prompt), model, max_tokens=n)]


def _prefilled(model, tokens: list[int]) -> list:
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    mx.eval(model(mx.array(tokens)[None], cache=cache))
    return cache


def _with_recurrent_state_of(cache: list, donor: list) -> list:
    """`cache`, its ArraysCaches (also those inside a CacheList) replaced by `donor`'s."""
    from mlx_lm.models.cache import ArraysCache, CacheList

    def pick(own, theirs):
        if isinstance(own, CacheList):
            return CacheList(*(pick(o, t) for o, t in zip(own.caches, theirs.caches, strict=True)))
        return theirs if isinstance(own, ArraysCache) else own

    return [pick(own, theirs) for own, theirs in zip(cache, donor, strict=True)]


def _continue(model, cache: list, last: int, n: int = 20) -> list[int]:
    import mlx.core as mx
    from mlx_lm.generate import generate_step

    return [int(token) for token, _ in generate_step(mx.array([last]), model, max_tokens=n, prompt_cache=cache)]


def _differ(a: list[int], b: list[int]) -> bool:
    return any(x != y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_loads_with_the_cache_kinds_of_its_family(tmp_path_factory, family):
    from mlx_lm.models.cache import make_prompt_cache

    model, _ = _load(tmp_path_factory, family)

    assert {type(c).__name__ for c in make_prompt_cache(model)} == CACHE_KINDS[family]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_saved_weights_survive_sanitize_unchanged(tmp_path_factory, family):
    import mlx.core as mx
    from mlx.utils import tree_flatten

    model, _ = _load(tmp_path_factory, family)
    saved = mx.load(str(family_model_path(tmp_path_factory, family) / "model.safetensors"))
    loaded = dict(tree_flatten(model.parameters()))

    assert loaded.keys() == saved.keys()
    assert all(v.dtype == mx.float32 for v in saved.values())
    assert [k for k in saved if not mx.array_equal(saved[k], loaded[k])] == []


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_sliding_layers_keep_window_tokens_beside_a_global_layer(tmp_path_factory, family):
    from mlx_lm.models.cache import KVCache, RotatingKVCache, make_prompt_cache

    model, _ = _load(tmp_path_factory, family)
    cache = make_prompt_cache(model)

    assert {c.max_size for c in cache if isinstance(c, RotatingKVCache)} == {WINDOW}
    assert any(type(c) is KVCache for c in cache)


@pytest.mark.parametrize("family", sorted(LATENT))
def test_latent_attention_caches_a_latent_and_a_rope_key(tmp_path_factory, family):
    model, _ = _load(tmp_path_factory, family)
    config = FAMILIES[family]

    cache = _prefilled(model, _prompt(10))

    # Per layer: keys (1, 1, L, kv_lora_rank), values (1, 1, L, qk_rope_head_dim).
    assert {(c.keys.shape[1], c.keys.shape[3], c.values.shape[1], c.values.shape[3], c.offset) for c in cache} == {
        (1, config["kv_lora_rank"], 1, config["qk_rope_head_dim"], 10)
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_decoding_is_not_degenerate(tmp_path_factory, family):
    model, _ = _load(tmp_path_factory, family)

    assert len(set(_greedy(model, _prompt(100), 40))) >= 5


@pytest.mark.parametrize("family", sorted(RECURRENT | WINDOWED))
def test_the_first_of_120_prompt_tokens_changes_the_continuation(tmp_path_factory, family):
    # Recurrent state (or, past the sliding window, the global layers) carries it 120 tokens on.
    model, _ = _load(tmp_path_factory, family)
    prompt = _prompt(120)

    assert _differ(_greedy(model, prompt, 20), _greedy(model, _other_first(prompt), 20))


@pytest.mark.parametrize("family", sorted(RECURRENT))
def test_a_recurrent_state_one_token_behind_changes_the_continuation(tmp_path_factory, family):
    model, _ = _load(tmp_path_factory, family)
    prompt = _prompt(120)
    right = _prefilled(model, prompt[:-1])
    late = _with_recurrent_state_of(_prefilled(model, prompt[:-1]), _prefilled(model, prompt[:-2]))

    assert _differ(_continue(model, right, prompt[-1]), _continue(model, late, prompt[-1]))


# lfm2's short convolutions hold only the last 2 inputs: its attention layers do the remembering.
@pytest.mark.parametrize("family", sorted(RECURRENT - {"lfm2"}))
def test_the_recurrent_state_alone_carries_the_first_of_120_tokens(tmp_path_factory, family):
    # The attention caches of the prompt, the recurrent state of the prompt with another first token.
    model, _ = _load(tmp_path_factory, family)
    prompt = _prompt(120)
    right = _prefilled(model, prompt[:-1])
    swapped = _with_recurrent_state_of(_prefilled(model, prompt[:-1]), _prefilled(model, _other_first(prompt)[:-1]))

    assert _differ(_continue(model, right, prompt[-1]), _continue(model, swapped, prompt[-1]))
