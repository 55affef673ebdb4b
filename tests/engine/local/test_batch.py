"""engine/local/batch.py and batcher.py: concurrent turns decode together, each as it would alone."""

import asyncio

from engine import GenerationParams, TextDelta, TurnStats
from engine.backend import StopSignal
from engine.local.batch import batch_refusal
from engine.types import FinishReason
from tests.turns import collect

GREEDY = GenerationParams(temperature=0.0, max_tokens=32)
# Prompts of different lengths: the rows' caches hold different numbers of tokens (padding, masks, offsets).
PROMPTS = [[{"role": "user", "content": "hello " * n + "there"}] for n in (0, 6, 25, 3)]


async def _alone_then_together(engine, prompts, params=GREEDY):
    alone = [await collect(engine, f"alone-{i}", m, params) for i, m in enumerate(prompts)]
    batcher = engine._local.batcher
    batcher.peak_rows = 0
    together = await asyncio.gather(*(collect(engine, f"together-{i}", m, params) for i, m in enumerate(prompts)))
    return alone, together, batcher.peak_rows


def test_concurrent_greedy_turns_decode_together_and_reply_as_each_would_alone(engine_with):
    alone, together, peak = engine_with(lambda e: _alone_then_together(e, PROMPTS))
    assert peak >= 3  # they did decode as rows of one batch
    for (text_a, stats_a), (text_b, stats_b) in zip(alone, together, strict=True):
        assert stats_b.finish_reason == FinishReason.LENGTH and stats_b.generated_tokens == GREEDY.max_tokens
        assert text_b == text_a and stats_b.reply_ids == stats_a.reply_ids


def test_two_concurrent_turns_of_different_lengths_match_their_turns_alone(engine_with):
    alone, together, peak = engine_with(lambda e: _alone_then_together(e, PROMPTS[1:3]))
    assert peak == 2
    assert [t for t, _ in together] == [t for t, _ in alone]


def test_a_follow_up_to_a_batched_turn_reuses_its_cache_and_replies_as_alone(engine_with):
    def follow_up(first: str) -> list:
        return [*PROMPTS[0], {"role": "assistant", "content": first}, {"role": "user", "content": "more"}]

    async def main(engine):
        first, _ = await collect(engine, "alone", PROMPTS[0], GREEDY)
        alone = await collect(engine, "alone", follow_up(first), GREEDY)
        both = await asyncio.gather(collect(engine, "c", PROMPTS[0], GREEDY), collect(engine, "x", PROMPTS[2], GREEDY))
        again = await asyncio.gather(
            collect(engine, "c", follow_up(both[0][0]), GREEDY), collect(engine, "y", PROMPTS[3], GREEDY)
        )
        return alone, again[0]

    (text, stats), (batched_text, batched_stats) = engine_with(main)
    assert batched_stats.reused_tokens == stats.reused_tokens > 0  # the batched reply's tokens were in its cache
    assert batched_text == text and batched_stats.reply_ids == stats.reply_ids


def test_stopping_one_request_drops_only_its_row(engine_with):
    async def main(engine):
        alone = [await collect(engine, f"alone-{i}", m, GREEDY) for i, m in enumerate(PROMPTS[:3])]
        stopped: list = []

        async def stop_after_five(conv):
            text, stats, deltas = "", None, 0
            async for ev in engine.chat(conv, PROMPTS[1], GREEDY):
                if isinstance(ev, TextDelta):
                    text += ev.text
                    deltas += 1
                    if deltas == 5:
                        engine.stop(conv)
                elif isinstance(ev, TurnStats):
                    stats = ev
            stopped.append((text, stats))

        others = asyncio.gather(collect(engine, "b0", PROMPTS[0], GREEDY), collect(engine, "b2", PROMPTS[2], GREEDY))
        await asyncio.gather(stop_after_five("b1"), others)
        cache = engine._local.session.caches.get("b1")
        return alone, await others, stopped[0], cache

    alone, others, (text, stats), cache = engine_with(main)
    assert stats.finish_reason == FinishReason.CANCELLED and 5 <= stats.generated_tokens < GREEDY.max_tokens
    assert alone[1][0].startswith(text)  # what it wrote before the stop is its reply alone, cut
    assert cache.token_ids == list(stats.prompt_ids) + list(stats.reply_ids)  # its cache holds exactly that
    assert [t for t, _ in others] == [alone[0][0], alone[2][0]]
    assert all(s.generated_tokens == GREEDY.max_tokens for _, s in others)


def test_two_turns_on_one_conversation_take_turns(engine_with):
    async def backend_turn(backend, conv):  # the backend's own: Engine.chat stops a conversation's running turn
        text, stats = "", None
        async for ev in backend.chat(conv, PROMPTS[0], GREEDY, StopSignal()):
            if isinstance(ev, TextDelta):
                text += ev.text
            elif isinstance(ev, TurnStats):
                stats = ev
        return text, stats

    async def main(engine):
        backend = engine._local
        backend.batcher.peak_rows = 0
        both = await asyncio.gather(backend_turn(backend, "same"), backend_turn(backend, "same"))
        return both, backend.batcher.peak_rows

    (first, second), peak = engine_with(main)
    assert peak == 1 and first[0] == second[0]
    assert second[1].reused_tokens == len(second[1].prompt_ids) - 1  # the second found the first's prompt, intact


def test_turns_that_cannot_batch_run_alone_in_turn(engine_with):
    seeded = GenerationParams(temperature=1.0, max_tokens=16, seed=7)

    async def main(engine):
        alone = await collect(engine, "s0", PROMPTS[1], seeded)
        engine._local.batcher.peak_rows = 0
        mixed = await asyncio.gather(
            collect(engine, "s1", PROMPTS[1], seeded), collect(engine, "g", PROMPTS[0], GREEDY)
        )
        return alone, mixed, engine._local.batcher.peak_rows

    alone, (again, greedy), peak = engine_with(main)
    assert again[0] == alone[0]  # a seed's samples do not depend on the request beside it
    assert peak <= 1 and greedy[1].generated_tokens == GREEDY.max_tokens


def test_what_cannot_batch_says_why():
    assert batch_refusal("", None, GREEDY) == ""
    assert batch_refusal("gemma3 models keep sliding-window or recurrent caches", None, GREEDY).startswith("gemma3")
    assert "seed" in batch_refusal("", None, GenerationParams(seed=1))
    assert "speculative" in batch_refusal("", None, GenerationParams(speculative=True))
    assert "constrained" in batch_refusal("", None, GenerationParams(response_format={"type": "json_object"}))


def test_importing_the_engine_and_its_batcher_imports_no_mlx():
    """OpenBLAS must be preloaded before mlx is imported (engine/local/blas.py): the batcher waits for the engine thread."""
    import subprocess
    import sys

    code = "import sys, engine, engine.local.backend, engine.local.batcher; print('mlx.core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_row_ending_never_evicts_the_cache_of_a_row_still_decoding(engine_with):
    """A budget of one byte: each cache is evicted (written to disk) as soon as its turn ends, never before."""

    def follow_up(prompt: list, reply: str) -> list:
        return [*prompt, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]

    async def main(engine):
        engine._local.idle_work = False
        firsts = await asyncio.gather(*(collect(engine, f"c{i}", m, GREEDY) for i, m in enumerate(PROMPTS[:3])))
        peak = engine._local.batcher.peak_rows
        seconds = [await collect(engine, f"c{i}", follow_up(PROMPTS[i], firsts[i][0]), GREEDY) for i in range(3)]
        return firsts, seconds, peak

    firsts, seconds, peak = engine_with(main, memory_budget_bytes=1)
    assert peak == 3
    for (_, first), (_, second) in zip(firsts, seconds, strict=True):
        held = len(first.prompt_ids) + len(first.reply_ids)
        assert second.reused_tokens == held  # the saved cache held the whole turn: prompt and reply


def test_a_turn_speculating_alone_joins_the_batch_when_another_comes(engine_with):
    long = GenerationParams(temperature=0.0, max_tokens=64)  # speculative by default on a CPU, alone

    async def main(engine):
        alone = [await collect(engine, f"alone-{i}", PROMPTS[i], long) for i in (1, 2)]
        engine._local.batcher.peak_rows = 0
        first_tokens = asyncio.Event()

        async def first():
            text, stats, deltas = "", None, 0
            async for ev in engine.chat("first", PROMPTS[1], long):
                if isinstance(ev, TextDelta):
                    text += ev.text
                    deltas += 1
                    if deltas == 5:
                        first_tokens.set()
                elif isinstance(ev, TurnStats):
                    stats = ev
            return text, stats

        async def second():
            await first_tokens.wait()
            return await collect(engine, "second", PROMPTS[2], long)

        both = await asyncio.gather(first(), second())
        return alone, both, engine._local.batcher.peak_rows

    alone, both, peak = engine_with(main)
    assert peak == 2  # the first left its decoding alone for the batch
    assert [t for t, _ in both] == [t for t, _ in alone]
    assert [s.reply_ids for _, s in both] == [s.reply_ids for _, s in alone]
    assert both[0][1].generated_tokens == 64


def test_rows_sampling_with_a_top_k_past_the_vocabulary_keep_every_token(engine_with):
    """issue 35 item 11: top_k up to 1000 is allowed, the tiny vocabulary has 400 tokens (mlx-lm
    refuses k >= it); batched rows sample through the same sampler as a turn alone."""
    params = GenerationParams(temperature=1.0, top_k=1000, max_tokens=12)

    async def main(engine):
        engine._local.batcher.peak_rows = 0
        together = await asyncio.gather(*(collect(engine, f"k-{i}", m, params) for i, m in enumerate(PROMPTS)))
        return together, engine._local.batcher.peak_rows

    together, peak = engine_with(main)
    assert peak >= 2
    for _, stats in together:
        assert stats.error == "" and stats.generated_tokens > 0
