"""White-box checks of the cache kinds: restored recurrent state, a window's bound, a saved file."""

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, make_prompt_cache

from engine.context import cache_file, kinds
from engine.context.conversation import ConversationCache
from engine.context.window_cache import DEFAULT_RESERVE, WindowedKVCache
from engine.local.generation import PREFILL_MAX_STEP, extend
from tests.tiny_families import WINDOW, family_model_path

IDS = [(7 * i + 3) % 380 + 10 for i in range(300)]


@pytest.fixture(scope="module", params=["qwen3_next", "mamba2", "falcon_h1"])
def recurrent(request, tmp_path_factory):
    import mlx_lm

    return mlx_lm.load(str(family_model_path(tmp_path_factory, request.param)))[0]


@pytest.fixture(scope="module")
def windowed(tmp_path_factory):
    import mlx_lm

    return mlx_lm.load(str(family_model_path(tmp_path_factory, "gemma3_text")))[0]


def _states(layers) -> list:
    return [a for leaf in kinds.leaves(layers) if isinstance(leaf, ArraysCache) for a in leaf.cache if a is not None]


def test_restored_recurrent_state_equals_a_one_shot_prefill(recurrent):
    conv = ConversationCache.create(recurrent, 64)
    extend(recurrent, conv, IDS[:250], marks=(100, 180))
    assert conv.truncate(200) == 180  # back to the checkpoint before the first differing token
    extend(recurrent, conv, IDS[180:260])
    one_shot = make_prompt_cache(recurrent)
    recurrent(mx.array(IDS[:260])[None], cache=one_shot)
    mx.eval(_states(one_shot))
    restored = _states(conv.layers)
    assert restored and len(restored) == len(_states(one_shot))
    for a, b in zip(restored, _states(one_shot)):
        assert a.dtype == mx.float32 and mx.allclose(a, b, atol=1e-4, rtol=1e-4).item()


def test_a_windowed_layer_holds_its_window_and_at_most_two_reserves(windowed):
    conv = ConversationCache.create(windowed, 64)
    extend(windowed, conv, IDS)
    for tok in IDS[:100]:  # decode-sized steps too
        extend(windowed, conv, [tok])
    leaves = [c for c in conv.leaves() if isinstance(c, WindowedKVCache)]
    assert leaves and all(c.offset == len(conv.token_ids) == 400 for c in leaves)
    bound = WINDOW - 1 + 2 * DEFAULT_RESERVE
    assert all(c.held <= bound for c in leaves)
    assert all(c.max_seq_len <= bound + PREFILL_MAX_STEP for c in leaves)  # the buffer: one chunk more at most


def test_a_windowed_cache_trims_within_its_reserve_and_not_past_it(windowed):
    conv = ConversationCache.create(windowed, 64)
    extend(windowed, conv, IDS)
    assert conv.can_trim_to(300 - DEFAULT_RESERVE)
    assert not conv.can_trim_to(300 - DEFAULT_RESERVE - 2 * WINDOW)
    assert conv.truncate(100) == 0  # no checkpoint taken: from nothing


def test_a_saved_hybrid_cache_with_checkpoints_reads_back_identical(recurrent, tmp_path):
    conv = ConversationCache.create(recurrent, 64)
    extend(recurrent, conv, IDS[:120], marks=(40, 90))
    path = tmp_path / "c.safetensors"
    cache_file.snapshot("c", conv).write(path)
    back = cache_file.read(path, cache_file.layout_of(recurrent, 2048), "c")
    assert back is not None and back.token_ids == conv.token_ids
    assert back.checkpoints.positions() == conv.checkpoints.positions() == [40, 90]
    for a, b in zip(_states(back.layers), _states(conv.layers)):
        assert mx.array_equal(a, b).item()
    assert back.truncate(60) == 40  # its checkpoints work as the original's


def test_a_saved_hybrid_cache_for_other_state_shapes_is_refused(recurrent, windowed, tmp_path):
    conv = ConversationCache.create(recurrent, 64)
    extend(recurrent, conv, IDS[:50])
    path = tmp_path / "c.safetensors"
    cache_file.snapshot("c", conv).write(path)
    with pytest.raises(cache_file.UnusableCache):
        cache_file.read(path, cache_file.layout_of(windowed, 2048), "c")


def test_an_unknown_cache_kind_is_refused_with_the_family_named():
    from mlx_lm.models.cache import ChunkedKVCache

    class Model:
        args = type("Args", (), {"model_type": "llama4"})()
        layers = [None]

        def make_cache(self):
            return [ChunkedKVCache(8)]

    with pytest.raises(kinds.UnsupportedCache, match="llama4 models are not supported yet: their ChunkedKVCache"):
        kinds.check_model(Model())


def test_checkpoints_keep_the_first_the_newest_and_older_ones_spaced_out():
    from engine.context.checkpoints import KEEP_NEWEST, MAX_CHECKPOINTS, Checkpoint, Checkpoints

    points = Checkpoints()
    for position in range(10, 400, 10):
        points.add(Checkpoint(position, (), 0))
    kept = points.positions()
    assert len(kept) == MAX_CHECKPOINTS and kept[0] == 10
    assert kept[-KEEP_NEWEST:] == [360, 370, 380, 390]
    older = kept[:-KEEP_NEWEST]
    gaps = [b - a for a, b in zip(older, older[1:])]
    assert min(gaps) >= 60  # spread over the chat, not bunched at its end
