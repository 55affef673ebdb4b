"""The engine end to end on the tiny model: reuse, stop, edit, limits, errors, memory."""

import asyncio
import threading
import time

import mlx.core as mx
import pytest

from engine import ChinwagError, ContextOverflowError, Engine, GenerationParams, TextDelta, TurnStats

GREEDY = GenerationParams(temperature=0.0, max_tokens=12)


def run(coro):
    return asyncio.run(coro)


async def turn(engine, conv, messages, params=GREEDY, stop_after=None):
    text, stats, seen = "", None, 0
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            text += ev.text
            seen += len(ev.token_ids)
            if stop_after is not None and seen >= stop_after and not getattr(engine, "stopped_at", 0):
                engine.stop(conv)
                engine.stopped_at = seen
        elif isinstance(ev, TurnStats):
            stats = ev
    assert isinstance(stats, TurnStats)
    return text, stats


async def evictions_written(engine):
    """Wait until the caches evicted so far are on disk (their files are written on a thread of their own)."""
    await asyncio.to_thread(engine._local.session.caches.writer.flush)


def reference(model, prompt_ids, max_tokens, eos):
    """A fresh mlx-lm computation from the same token ids (greedy)."""
    from mlx_lm.generate import generate_step

    out = []
    for tok, _ in generate_step(mx.array(prompt_ids), model, max_tokens=max_tokens):
        out.append(int(tok))
        if int(tok) in eos:
            break
    return out


def test_follow_up_turns_prefill_only_new_tokens_and_match_fresh_mlx_lm(engine_with, tiny_model):
    model, tokenizer = tiny_model

    async def body(engine):
        messages, results = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}], []
        for i in range(3):
            text, stats = await turn(engine, "c", messages)
            results.append(stats)
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And then {i}?"}]
        return results

    results = engine_with(body, kv_initial_capacity=16)
    for i, stats in enumerate(results):
        assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)
        if i:
            prev = results[i - 1]
            held = len(prev.prompt_ids) + len(prev.reply_ids)
            # The whole previous turn is reused: the reply's generated ids are spliced back in.
            assert list(stats.prompt_ids[:held]) == list(prev.prompt_ids) + list(prev.reply_ids)
            assert stats.reused_tokens == held
            assert stats.prefilled_tokens == len(stats.prompt_ids) - held
        assert stats.kv_offset == len(stats.prompt_ids) + len(stats.reply_ids)
    assert results[-1].kv_capacity >= 64  # grew from 16 several times


def test_stop_is_effective_within_one_token_and_keeps_prompt_plus_emitted(engine_with, monkeypatch):
    async def body(engine):
        model = engine._local.session.model
        real = type(model).__call__

        def slow(self, *args, **kwargs):  # slower than the consumer, as real models are
            time.sleep(0.03)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(type(model), "__call__", slow)
        msgs = [{"role": "user", "content": "Tell me a story"}]
        engine.stopped_at = 0
        text, stats = await turn(engine, "s", msgs, GenerationParams(temperature=0, max_tokens=50), stop_after=3)
        monkeypatch.setattr(type(model), "__call__", real)
        assert stats.finish_reason == "cancelled"
        assert engine.stopped_at <= stats.generated_tokens <= engine.stopped_at + 1
        assert stats.kv_offset == len(stats.prompt_ids) + len(stats.reply_ids)
        _, nxt = await turn(
            engine, "s", msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": "go on"}]
        )
        assert nxt.reused_tokens == stats.kv_offset
        return True

    assert engine_with(body)


def test_regenerate_and_edit_trim_instead_of_rebuilding(engine_with):
    async def body(engine):
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        _, first = await turn(engine, "r", msgs)
        _, again = await turn(engine, "r", msgs)  # regenerate: the same messages
        assert again.reused_tokens == len(first.prompt_ids) - 1 and again.prefilled_tokens == 1
        assert again.reply_ids == first.reply_ids  # greedy
        edited = [{"role": "user", "content": "What is the capital of Spain?"}]
        _, edit = await turn(engine, "r", edited)
        assert 0 < edit.reused_tokens < len(first.prompt_ids)
        assert edit.kv_offset == len(edit.prompt_ids) + len(edit.reply_ids)

    engine_with(body)


def test_max_tokens_and_context_limit(engine_with):
    async def body(engine):
        msgs = [{"role": "user", "content": "Hello"}]
        _, stats = await turn(engine, "m", msgs, GenerationParams(temperature=0, max_tokens=5))
        assert stats.finish_reason in ("length", "stop") and stats.generated_tokens <= 5
        cap = len(stats.prompt_ids) + 3
        _, capped = await turn(engine, "m2", msgs, GenerationParams(temperature=0, max_tokens=50, context_cap=cap))
        assert capped.kv_offset <= cap and capped.context_limit == cap
        assert capped.finish_reason in ("context", "stop")
        # A long chat under a small cap drops its oldest turns and says so.
        history = [{"role": "system", "content": "sys"}]
        for i in range(6):
            history += [
                {"role": "user", "content": f"question number {i} " * 3},
                {"role": "assistant", "content": f"answer {i} " * 3},
            ]
        history.append({"role": "user", "content": "last"})
        _, dropped = await turn(engine, "m3", history, GenerationParams(temperature=0, max_tokens=4, context_cap=80))
        assert dropped.dropped_messages > 0 and dropped.prompt_tokens < 80 and dropped.kv_offset <= 80
        with pytest.raises(ContextOverflowError, match="context limit is 20"):
            await turn(engine, "m4", [{"role": "user", "content": "word " * 100}], GenerationParams(context_cap=20))
        return True

    assert engine_with(body)


def test_bad_input_raises_one_line_errors(engine_with):
    async def body(engine):
        for bad in ([], [{"role": "wizard", "content": "x"}], [{"role": "system", "content": "only"}], "text"):
            with pytest.raises(ChinwagError) as info:
                await turn(engine, "b", bad)
            assert "\n" not in str(info.value)
        return True

    assert engine_with(body)


def test_chat_without_a_model_raises():
    async def main():
        engine = Engine()
        try:
            with pytest.raises(ChinwagError, match="no model is loaded"):
                await turn(engine, "x", [{"role": "user", "content": "hi"}])
        finally:
            await engine.close()

    run(main())


def test_error_mid_generation_repairs_the_cache_and_the_thread_lives(engine_with, monkeypatch):
    async def body(engine):
        msgs = [{"role": "user", "content": "Hello"}]
        model = engine._local.session.model
        calls = {"n": 0}
        real = type(model).__call__

        def flaky(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 4:
                raise RuntimeError("simulated failure")
            return real(self, *args, **kwargs)

        monkeypatch.setattr(type(model), "__call__", flaky)
        _, stats = await turn(engine, "e", msgs, GenerationParams(temperature=0, max_tokens=10))
        assert stats.finish_reason == "error" and "simulated failure" in stats.error
        assert stats.kv_offset == len(stats.prompt_ids) + len(stats.reply_ids)
        monkeypatch.setattr(type(model), "__call__", real)
        assert engine._local.thread.alive
        _, ok = await turn(engine, "e", msgs, GenerationParams(temperature=0, max_tokens=3))
        assert ok.finish_reason in ("length", "stop")
        return True

    assert engine_with(body)


def test_seeded_sampling_is_reproducible(engine_with):
    params = GenerationParams(
        temperature=0.9, top_p=0.9, top_k=50, min_p=0.02, repetition_penalty=1.2, max_tokens=8, seed=7
    )

    async def body(engine):
        msgs = [{"role": "user", "content": "Hello"}]
        _, a = await turn(engine, "p1", msgs, params)
        _, b = await turn(engine, "p2", msgs, params)
        return a.reply_ids, b.reply_ids

    a, b = engine_with(body)
    assert a == b and len(a) > 0


def test_conversations_keep_separate_caches_and_budget_evicts_to_disk(engine_with, chinwag_home):
    async def body(engine):
        first = [{"role": "user", "content": "Hello there"}]
        text, a = await turn(engine, "one", first)
        await turn(engine, "two", [{"role": "user", "content": "Another chat"}])  # evicts "one"
        await evictions_written(engine)
        report = await engine.memory_stats()
        assert report.evictions >= 1 and report.conversations_in_memory == 1 and report.budget_bytes == 1
        assert list((chinwag_home / "kv").rglob("*.safetensors"))
        follow = first + [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
        _, b = await turn(engine, "one", follow)
        report = await engine.memory_stats()
        assert report.restores >= 1 and report.restore_seconds > 0
        assert report.tokens_held == b.kv_offset and report.kv_bytes == b.kv_bytes
        assert b.reused_tokens == len(a.prompt_ids) + len(a.reply_ids)
        await engine.forget("one")
        return True

    assert engine_with(body, memory_budget_bytes=1)


def test_switching_models_while_generating_stops_first(engine_with, tiny_model_path):
    async def body(engine):
        got = []

        async def long_reply():
            async for ev in engine.chat(
                "g", [{"role": "user", "content": "Hi"}], GenerationParams(temperature=0, max_tokens=100000)
            ):
                got.append(ev)
                if len(got) == 2:
                    asyncio.get_running_loop().create_task(engine.load_model(str(tiny_model_path)))

        await asyncio.wait_for(long_reply(), 60)
        assert got[-1].finish_reason == "cancelled"
        while engine.state.state == "loading":
            await asyncio.sleep(0.01)
        assert engine.state.state == "ready"
        return True

    assert engine_with(body)


def test_failed_load_keeps_the_previous_model(engine_with, tmp_path):
    async def body(engine):
        before = engine.current_model
        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "config.json").write_text("{not json")
        with pytest.raises(ChinwagError):
            await engine.load_model(str(broken))
        assert engine.current_model == before
        _, stats = await turn(engine, "k", [{"role": "user", "content": "still here?"}])
        return stats.generated_tokens

    assert engine_with(body) > 0


def test_all_mlx_work_stays_on_the_engine_thread(engine_with, monkeypatch):
    seen = set()
    real = mx.eval

    def spy(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(mx, "eval", spy)

    async def body(engine):
        await turn(engine, "t", [{"role": "user", "content": "Hi"}])
        return True

    engine_with(body)
    assert seen == {"chinwag-engine"}


def test_models_with_sliding_window_caches_chat_and_follow_up(tmp_path, tiny_model_path):
    """Gemma 3's rotating caches can't be trimmed once wrapped: the engine re-prefills instead."""
    import mlx_lm

    from tests.tiny_model import GEMMA3_CONFIG, build_tiny_model

    path = build_tiny_model(tmp_path / "gemma", config=GEMMA3_CONFIG)
    model, tokenizer = mlx_lm.load(str(path))

    async def main():
        engine = Engine()
        try:
            await engine.load_model(str(path))
            msgs, out = [{"role": "user", "content": "Hello there, tell me something"}], []
            for i in range(3):
                text, stats = await turn(engine, "g", msgs, GenerationParams(temperature=0, max_tokens=6))
                out.append(stats)
                msgs += [{"role": "assistant", "content": text}, {"role": "user", "content": f"more {i}"}]
            # Regenerate the last reply: the same messages again.
            _, again = await turn(engine, "g", msgs[:-2], GenerationParams(temperature=0, max_tokens=6))
            out.append(again)
            return out
        finally:
            await engine.close()

    results = run(main())
    for stats in results:
        assert stats.finish_reason in ("length", "stop"), stats.error
        assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 6, tokenizer.eos_token_ids)


def test_stop_during_a_long_prefill_keeps_the_computed_prefix(engine_with, monkeypatch):
    from engine.local import generation

    async def body(engine):
        model = engine._local.session.model
        real = type(model).__call__
        chunks = []

        def slow(self, *args, **kwargs):
            chunks.append(1)
            if len(chunks) == 2:
                engine.stop("long")  # as if the user pressed Stop mid-prefill
            return real(self, *args, **kwargs)

        monkeypatch.setattr(type(model), "__call__", slow)
        msgs = [{"role": "user", "content": "word " * (8 * generation.PREFILL_FIRST_STEP)}]
        _, stats = await turn(engine, "long", msgs, GenerationParams(temperature=0, max_tokens=5))
        monkeypatch.setattr(type(model), "__call__", real)
        assert stats.finish_reason == "cancelled" and stats.generated_tokens == 0
        # Two chunks computed (the first 32 tokens, then a doubled chunk), the rest not.
        assert stats.kv_offset == 3 * generation.PREFILL_FIRST_STEP < stats.prompt_tokens
        _, resumed = await turn(engine, "long", msgs, GenerationParams(temperature=0, max_tokens=2))
        assert resumed.reused_tokens == stats.kv_offset
        return True

    assert engine_with(body)


def test_a_reply_cut_at_max_tokens_continues_exactly_from_the_cache(engine_with, tiny_model):
    _, tokenizer = tiny_model

    async def body(engine):
        msgs = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
        text, cut = await turn(engine, "k", msgs, GenerationParams(temperature=0.0, max_tokens=6))
        assert cut.finish_reason == "length"
        more = msgs + [{"role": "assistant", "content": text}]
        params = GenerationParams(temperature=0.0, max_tokens=6, continue_reply=True)
        rest, cont = await turn(engine, "k", more, params)
        # Nothing is read again: the prompt is the first one and the six tokens written.
        assert cont.prompt_ids == cut.prompt_ids + cut.reply_ids
        assert cont.reused_tokens == len(cont.prompt_ids) - 1 and cont.prefilled_tokens == 1
        # As if the first reply had had twelve tokens.
        whole_text, whole = await turn(engine, "fresh", msgs, GenerationParams(temperature=0.0, max_tokens=12))
        assert cut.reply_ids + cont.reply_ids == whole.reply_ids[: len(cut.reply_ids) + len(cont.reply_ids)]
        if cont.finish_reason == "length":  # and the same text (the continuation decodes in context)
            assert text + rest == whole_text
        # The history remembers the whole reply: a follow-up after it reuses it all.
        both = msgs + [{"role": "assistant", "content": text + rest}, {"role": "user", "content": "And then?"}]
        _, follow = await turn(engine, "k", both, GenerationParams(temperature=0.0, max_tokens=3))
        assert follow.reused_tokens >= len(cont.prompt_ids) + len(cont.reply_ids) - 1
        # Without its cache (a restart, or another chat's history), the reply's text is read instead.
        _, cold = await turn(engine, "cold", more, params)
        written = tokenizer.encode(text, add_special_tokens=False)
        assert list(cold.prompt_ids) == list(cut.prompt_ids) + written
        assert cold.reused_tokens >= len(cut.prompt_ids)  # the prompt, shared from "k"'s cache
        assert cold.generated_tokens > 0
        with pytest.raises(ChinwagError, match="no reply to continue"):
            await turn(engine, "k", msgs, params)

    engine_with(body)
