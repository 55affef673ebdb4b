"""Quantized KV caches (--kv-bits): growth, exact trims, mlx-lm's quantized attention, the engine end to end."""

import asyncio

import mlx.core as mx
import pytest
from mlx_lm.models.cache import QuantizedKVCache

from engine import ChinwagError, Engine, GenerationParams, TextDelta, TurnStats
from engine.context import cache_file
from engine.context.conversation import ConversationCache
from engine.context.quantized_cache import QuantizedContiguousKVCache
from engine.local.generation import extend
from engine.types import KVQuantization
from tests.tiny_model import CONFIG, build_tiny_model

GREEDY = GenerationParams(temperature=0.0, max_tokens=10)


@pytest.fixture(scope="module")
def wide_model_path(tmp_path_factory):
    """The tiny llama with head dimensions of 64: a multiple of the default quantization group."""
    return build_tiny_model(tmp_path_factory.mktemp("wide"), config=dict(CONFIG, head_dim=64))


@pytest.fixture(scope="module")
def wide_model(wide_model_path):
    import mlx_lm

    return mlx_lm.load(str(wide_model_path))


def kv(n, seed):
    mx.random.seed(seed)
    return mx.random.normal((1, 2, n, 64)), mx.random.normal((1, 2, n, 64))


def test_it_grows_on_both_write_paths_and_holds_what_mlx_lm_quantizes():
    ours, theirs = QuantizedContiguousKVCache(8, 64, max_seq_len=4), QuantizedKVCache(64, 8)
    for n, seed in [(3, 0), (1, 1), (1, 2), (9, 3), (1, 4)]:
        a, b = ours.update_and_fetch(*kv(n, seed)), theirs.update_and_fetch(*kv(n, seed))
        assert all(mx.array_equal(x, y).item() for side in range(2) for x, y in zip(a[side], b[side]))
    assert ours.offset == 15 and ours.max_seq_len == 16


def test_a_trim_drops_exactly_the_last_tokens():
    cache = QuantizedContiguousKVCache(4, 32, max_seq_len=8)
    cache.update_and_fetch(*kv(6, 0))
    assert cache.trim(2) == 2 and cache.offset == 4
    keys, _ = cache.update_and_fetch(*kv(1, 9))
    again = mx.quantize(kv(1, 9)[0], group_size=32, bits=4)
    assert all(mx.array_equal(k[..., 4:5, :], q).item() for k, q in zip(keys, again))


def test_settings_mlx_cannot_quantize_to_are_refused_in_one_line():
    with pytest.raises(ChinwagError, match="--kv-bits must be one of 2, 3, 4, 5, 6, 8, got 7"):
        KVQuantization(7)
    with pytest.raises(ChinwagError, match="--kv-group-size must be one of 32, 64, 128, got 48"):
        KVQuantization(8, 48)


def test_a_model_whose_head_dimension_the_group_does_not_divide_is_refused_at_load(tiny_model_path):
    async def body():
        engine = Engine(kv_quantization=KVQuantization(8, 64))
        try:
            with pytest.raises(ChinwagError, match="multiples of its group size 64"):
                await engine.load_model(str(tiny_model_path))  # head dimension 16
        finally:
            await engine.close()

    asyncio.run(body())


def _greedy_with_mlx_lm_quantized_cache(model, prompt, bits, n, eos, chunk=None):
    """A fresh computation: mlx-lm's own QuantizedKVCache from the first token, greedy; the prompt read in
    one pass, or all but its last token in chunks of `chunk` first."""
    cache = [QuantizedKVCache(64, bits) for _ in model.layers]
    if chunk:
        for start in range(0, len(prompt) - 1, chunk):
            model(mx.array(prompt[start : min(start + chunk, len(prompt) - 1)])[None], cache=cache)
        prompt = prompt[-1:]
    logits = model(mx.array(prompt)[None], cache=cache)[:, -1, :]
    out = []
    for _ in range(n):
        tok = int(mx.argmax(logits, axis=-1).item())
        out.append(tok)
        if tok in eos:
            break
        logits = model(mx.array([[tok]]), cache=cache)[:, -1, :]
    return out


async def _chat(path, quant, turns=12):
    engine = Engine(kv_quantization=quant)
    results, messages = [], [{"role": "system", "content": "Be brief."}]
    try:
        await engine.load_model(str(path))
        for i in range(turns):
            messages.append({"role": "user", "content": f"Tell me about the fox, part {i}."})
            text, stats = "", None
            async for ev in engine.chat("q", messages, GREEDY):
                if isinstance(ev, TextDelta):
                    text += ev.text
                elif isinstance(ev, TurnStats):
                    stats = ev
            results.append(stats)
            messages.append({"role": "assistant", "content": text})
    finally:
        await engine.close()
    return results


@pytest.fixture(scope="module")
def runs(wide_model_path, tmp_path_factory):
    out = {}
    for bits in (None, 8, 4):
        mp = pytest.MonkeyPatch()
        mp.setenv("CHINWAG_HOME", str(tmp_path_factory.mktemp(f"home-{bits}")))
        try:
            out[bits] = asyncio.run(_chat(wide_model_path, KVQuantization(bits) if bits else None))
        finally:
            mp.undo()
    return out


@pytest.mark.parametrize("bits", [8, 4])
def test_a_quantized_chat_reuses_the_whole_history_on_every_follow_up(runs, bits):
    for prev, stats in zip(runs[bits], runs[bits][1:]):
        assert stats.reused_tokens == len(prev.prompt_ids) + len(prev.reply_ids)


@pytest.mark.parametrize("bits, most", [(8, 0.35), (4, 0.2)])
def test_a_quantized_cache_holds_a_fraction_of_the_full_precision_bytes(runs, bits, most):
    assert runs[bits][-1].kv_bytes <= most * runs[None][-1].kv_bytes


def test_every_8_bit_reply_equals_mlx_lm_with_its_quantized_cache(runs, wide_model):
    model, tokenizer = wide_model
    for stats in runs[8]:
        expected = _greedy_with_mlx_lm_quantized_cache(model, list(stats.prompt_ids), 8, 10, tokenizer.eos_token_ids)
        assert list(stats.reply_ids) == expected


def test_every_4_bit_reply_equals_mlx_lm_with_its_quantized_cache_read_in_some_chunks(runs, wide_model):
    """At 4 bits a rounding difference between prefill chunkings can move a key across a quantization step:
    mlx-lm's own replies then differ by chunking (with OpenBLAS, 4 of these 12 differ between one pass and
    7-token chunks). A cache that loses or misplaces a position matches none of them."""
    model, tokenizer = wide_model
    for stats in runs[4]:
        prompt = list(stats.prompt_ids)
        candidates = [
            _greedy_with_mlx_lm_quantized_cache(model, prompt, 4, 10, tokenizer.eos_token_ids, chunk)
            for chunk in (None, 32, 7)
        ]
        assert list(stats.reply_ids) in candidates


def test_a_saved_quantized_cache_restores_and_one_of_other_settings_is_dropped(wide_model, tmp_path):
    model, _ = wide_model
    conv = ConversationCache.create(model, 16, KVQuantization(8))
    extend(model, conv, list(range(5, 45)))
    path = tmp_path / "c.safetensors"
    cache_file.snapshot("c", conv).write(path)
    back = cache_file.read(path, cache_file.layout_of(model, 2048, KVQuantization(8)), "c")
    assert back is not None and back.token_ids == conv.token_ids
    assert all(
        mx.array_equal(x, y).item()
        for a, b in zip(back.leaves(), conv.leaves())
        for side in range(2)
        for x, y in zip(a.get_kv()[side], b.get_kv()[side])
    )
    for other in (KVQuantization(4), None):
        with pytest.raises(cache_file.UnusableCache):
            cache_file.read(path, cache_file.layout_of(model, 2048, other), "c")


def test_a_quantized_chat_regenerated_edited_and_restarted_matches_a_fresh_computation(
    wide_model_path, wide_model, chinwag_home
):
    model, tokenizer = wide_model
    quant = KVQuantization(8)

    async def turn(engine, messages):
        stats = None
        async for ev in engine.chat("r", messages, GREEDY):
            if isinstance(ev, TurnStats):
                stats = ev
        return stats

    async def body():
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        engine = Engine(kv_quantization=quant)
        await engine.load_model(str(wide_model_path))
        first = await turn(engine, msgs)
        again = await turn(engine, msgs)
        edit = await turn(engine, [{"role": "user", "content": "What is the capital of Spain?"}])
        await engine.close()
        engine = Engine(kv_quantization=quant)
        await engine.load_model(str(wide_model_path))
        restarted = await turn(engine, [{"role": "user", "content": "What is the capital of Spain?"}])
        await engine.close()
        return first, again, edit, restarted

    first, again, edit, restarted = asyncio.run(body())
    assert again.reused_tokens == len(first.prompt_ids) - 1
    assert 0 < edit.reused_tokens < len(edit.prompt_ids)
    assert restarted.reused_tokens == len(restarted.prompt_ids) - 1
    for stats in (first, again, edit, restarted):
        expected = _greedy_with_mlx_lm_quantized_cache(model, list(stats.prompt_ids), 8, 10, tokenizer.eos_token_ids)
        assert list(stats.reply_ids) == expected


def test_a_new_quantized_chat_starts_from_another_chats_prefix_in_memory_and_after_a_restart(
    wide_model_path, wide_model, chinwag_home
):
    from tests.family_chat import LONG_SYSTEM

    model, tokenizer = wide_model
    quant = KVQuantization(8)

    async def turn(engine, conv, question):
        stats = None
        async for ev in engine.chat(conv, [LONG_SYSTEM, {"role": "user", "content": question}], GREEDY):
            if isinstance(ev, TurnStats):
                stats = ev
        return stats

    async def body():
        engine = Engine(kv_quantization=quant)
        await engine.load_model(str(wide_model_path))
        first = await turn(engine, "a", "What is the capital of France?")
        second = await turn(engine, "b", "What is the capital of Spain?")
        await engine.close()
        engine = Engine(kv_quantization=quant)
        await engine.load_model(str(wide_model_path))
        restarted = await turn(engine, "c", "What is the capital of Italy?")
        await engine.close()
        return first, second, restarted

    first, second, restarted = asyncio.run(body())
    system = len(tokenizer.encode(LONG_SYSTEM["content"], add_special_tokens=False))
    assert first.reused_tokens == 0
    assert second.reused_tokens >= 0.9 * system and restarted.reused_tokens >= 0.9 * system
    for stats in (second, restarted):
        expected = _greedy_with_mlx_lm_quantized_cache(model, list(stats.prompt_ids), 8, 10, tokenizer.eos_token_ids)
        assert list(stats.reply_ids) == expected


@pytest.fixture(scope="module")
def quantized_script(wide_model_path, tmp_path_factory):
    """The family script (tests/family_chat.py) with an 8-bit cache: turns, regenerate, edits, a version
    switch, a read-ahead, a sliding context cap, a fork, shared prefixes, a restart and an eviction."""
    from tests.family_chat import run_chat

    mp = pytest.MonkeyPatch()
    mp.setenv("CHINWAG_HOME", str(tmp_path_factory.mktemp("home-script")))
    try:
        return asyncio.run(run_chat(wide_model_path, kv_quantization=KVQuantization(8)))
    finally:
        mp.undo()


def test_every_step_of_the_family_script_on_an_8_bit_cache_equals_mlx_lms_quantized_computation(
    quantized_script, wide_model
):
    model, tokenizer = wide_model
    steps = [v for v in quantized_script.steps.values() if isinstance(v, TurnStats)]
    for stats in quantized_script.turns + steps:
        expected = _greedy_with_mlx_lm_quantized_cache(
            model, list(stats.prompt_ids), 8, len(stats.reply_ids), tokenizer.eos_token_ids
        )
        assert list(stats.reply_ids) == expected


def test_every_step_of_the_family_script_on_an_8_bit_cache_reuses_what_it_shares(quantized_script):
    turns, steps = quantized_script.turns, quantized_script.steps
    for prev, stats in zip(turns, turns[1:]):
        assert stats.reused_tokens == len(prev.prompt_ids) + len(prev.reply_ids)
    assert steps["regenerate"].reused_tokens == len(steps["regenerate"].prompt_ids) - 1
    for name in ("edit last", "edit middle", "switch back", "after draft", "forked turn", "after restart"):
        assert steps[name].reused_tokens > 0, name
    assert steps["after eviction"].reused_tokens > len(steps["after restart"].prompt_ids)
    assert steps["shared second"].reused_tokens > 0 and steps["shared after restart"].reused_tokens > 0
