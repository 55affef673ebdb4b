"""Every model family's cache kinds through the engine: many turns past the window, regenerate,
edits, a version switch, a read-ahead draft, a sliding context cap, eviction and a restart.

Each family's chat runs once (`script`); the tests read what it recorded. Every reply must equal
a fresh mlx-lm `generate_step` over the same ids (mlx-lm's own caches: RotatingKVCache,
ArraysCache...), and reuse is asserted from the turn's stats.
"""

import asyncio
from dataclasses import dataclass, field

import mlx.core as mx
import pytest

from engine import Engine, GenerationParams, TextDelta, TurnStats
from tests.tiny_families import FAMILIES, RECURRENT, WINDOW, family_model_path

MAX = 12
GREEDY = GenerationParams(temperature=0.0, max_tokens=MAX)
SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
QUESTIONS = [
    "Hello, how are you today?",
    "What is the capital of France?",
    "Tell me a story about a cat.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and code.",
    "Markdown has headings, lists and tables.",
    "The quick brown fox jumps over the lazy dog.",
    "A chat app keeps every conversation.",
]


@dataclass
class Script:
    """What one family's chat recorded: each step's stats, by name, and the held ids before it."""

    steps: dict = field(default_factory=dict)
    held_before: dict = field(default_factory=dict)
    turns: list = field(default_factory=list)


async def _turn(engine, conv, messages, params=GREEDY):
    text, stats = "", None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            text += ev.text
        elif isinstance(ev, TurnStats):
            stats = ev
    assert stats is not None and not stats.error, stats
    return text, stats


def _with_replies(texts):
    messages = [SYSTEM]
    for q, a in zip(QUESTIONS, texts):
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages


async def _chat(path, home_budget=None) -> Script:
    s = Script()
    engine = Engine(memory_budget_bytes=home_budget)
    try:
        await engine.load_model(str(path))
        texts = []
        for q in QUESTIONS:  # 7 turns, far past the window
            text, stats = await _turn(engine, "c", _with_replies(texts) + [{"role": "user", "content": q}])
            s.turns.append(stats)
            texts.append(text)
        last = _with_replies(texts[:-1]) + [{"role": "user", "content": QUESTIONS[-1]}]
        _, s.steps["regenerate"] = await _turn(engine, "c", last)
        edited = last[:-1] + [{"role": "user", "content": "A chat app keeps every message."}]
        _, s.steps["edit last"] = await _turn(engine, "c", edited)
        middle = [dict(m) for m in last]
        middle[5] = {"role": "user", "content": "Tell me a story about a dog."}
        _, s.steps["edit middle"] = await _turn(engine, "c", middle)
        _, s.steps["switch back"] = await _turn(engine, "c", last)
        draft = _with_replies(texts) + [{"role": "user", "content": "Please"}]
        s.steps["read ahead"] = await engine.prefill("c", draft, GREEDY)
        sent = draft[:-1] + [{"role": "user", "content": "Please summarise the chat so far in one line."}]
        answer, s.steps["after draft"] = await _turn(engine, "c", sent)
        capped = GenerationParams(temperature=0.0, max_tokens=MAX, context_cap=8 * WINDOW)
        _, s.steps["slide"] = await _turn(engine, "capped", sent, capped)
        _, s.steps["slide again"] = await _turn(
            engine,
            "capped",
            sent + [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "More?"}],
            capped,
        )
        fork = await engine.fork("c", "f", last[:4], GREEDY)
        s.steps["fork"] = fork
        _, s.steps["forked turn"] = await _turn(engine, "f", last[:4])
    finally:
        await engine.close()
    engine = Engine(memory_budget_bytes=1)  # a restart (the caches saved at close), and every other chat evicted
    try:
        await engine.load_model(str(path))
        follow = sent + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks!"}]
        thanks, s.steps["after restart"] = await _turn(engine, "c", follow)
        await _turn(engine, "other", [{"role": "user", "content": "Hello"}])  # evicts "c" to disk
        await asyncio.to_thread(engine._local.session.caches.writer.flush)
        again = follow + [{"role": "assistant", "content": thanks}, {"role": "user", "content": "Bye!"}]
        _, s.steps["after eviction"] = await _turn(engine, "c", again)
    finally:
        await engine.close()
    return s


def _reference(model, prompt_ids, eos):
    from mlx_lm.generate import generate_step

    out = []
    for tok, _ in generate_step(mx.array(prompt_ids), model, max_tokens=MAX):
        out.append(int(tok))
        if int(tok) in eos:
            break
    return out


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    import mlx_lm

    path = family_model_path(tmp_path_factory, request.param)
    home = tmp_path_factory.mktemp(f"home-{request.param}")
    mp = pytest.MonkeyPatch()
    mp.setenv("CHINWAG_HOME", str(home))
    try:
        script = asyncio.run(_chat(path))
    finally:
        mp.undo()
    model, tokenizer = mlx_lm.load(str(path))
    return request.param, script, model, tokenizer


def _all_turns(script):
    return script.turns + [v for v in script.steps.values() if isinstance(v, TurnStats)]


def test_every_reply_equals_a_fresh_mlx_lm_computation(family):
    name, script, model, tokenizer = family
    for stats in _all_turns(script):
        assert list(stats.reply_ids) == _reference(model, list(stats.prompt_ids), tokenizer.eos_token_ids), name


def test_follow_ups_reuse_the_whole_history(family):
    _, script, _, _ = family
    for prev, stats in zip(script.turns, script.turns[1:]):
        assert stats.reused_tokens == len(prev.prompt_ids) + len(prev.reply_ids)


def test_regenerate_reuses_all_but_the_last_prompt_token(family):
    _, script, _, _ = family
    stats = script.steps["regenerate"]
    assert stats.reused_tokens == len(stats.prompt_ids) - 1


def test_an_edit_of_the_last_message_reuses_what_comes_before_it(family):
    _, script, _, _ = family
    regen, edit = script.steps["regenerate"], script.steps["edit last"]
    before_last = len(script.turns[-2].prompt_ids) + len(script.turns[-2].reply_ids)  # up to the last user message
    assert before_last <= edit.reused_tokens < len(regen.prompt_ids)


def test_an_edit_in_the_middle_and_a_version_switch_reuse_part_of_what_they_share(family):
    _, script, _, _ = family
    assert script.steps["edit middle"].reused_tokens > 0
    assert script.steps["switch back"].reused_tokens > 0


def test_a_read_ahead_draft_is_kept_when_a_longer_message_is_sent(family):
    _, script, _, _ = family
    ahead, sent = script.steps["read ahead"], script.steps["after draft"]
    assert ahead.finished and ahead.computed_tokens > 0
    start_of_message = len(script.turns[-1].prompt_ids) + len(script.turns[-1].reply_ids)
    assert sent.reused_tokens >= start_of_message


def test_a_sliding_context_cap_keeps_replies_exact_and_reuses_the_system_prompt(family):
    _, script, _, _ = family
    assert script.steps["slide again"].dropped_messages > 0 or script.steps["slide"].dropped_messages > 0
    assert script.steps["slide again"].reused_tokens > 0


def test_a_fork_starts_from_its_parents_cache(family):
    _, script, _, _ = family
    assert script.steps["fork"].copied_tokens > 0
    assert script.steps["forked turn"].reused_tokens > 0


def test_a_restart_reuses_the_saved_history(family):
    name, script, _, _ = family
    before = script.steps["after draft"]
    assert script.steps["after restart"].reused_tokens >= len(before.prompt_ids) + len(before.reply_ids), name


def test_an_evicted_cache_is_restored_whole(family):
    name, script, _, _ = family
    before = script.steps["after restart"]
    assert script.steps["after eviction"].reused_tokens >= len(before.prompt_ids) + len(before.reply_ids), name


def test_recurrent_families_do_not_speculate(family):
    name, script, _, _ = family
    if name in RECURRENT:
        assert all(s.drafted_tokens == 0 for s in _all_turns(script))
