"""Every model family's cache kinds through the engine: many turns past the window, regenerate,
edits, a version switch, a read-ahead draft, a sliding context cap, eviction and a restart.

Each family's chat (tests/family_chat.py) runs once; the tests read what it recorded. Every reply must equal
a fresh mlx-lm `generate_step` over the same ids (mlx-lm's own caches: RotatingKVCache,
ArraysCache...), and reuse is asserted from the turn's stats.
"""

import asyncio

import mlx.core as mx
import pytest

from engine import TurnStats
from tests.family_chat import LONG_SYSTEM, MAX, run_chat
from tests.tiny_families import FAMILIES, RECURRENT, family_model_path


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
        script = asyncio.run(run_chat(path))
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


def test_a_new_chat_with_the_same_long_system_prompt_starts_from_another_chats_cache(family):
    name, script, _, tokenizer = family
    system = len(tokenizer.encode(LONG_SYSTEM["content"], add_special_tokens=False))
    assert system > 1400 and script.steps["shared first"].reused_tokens == 0
    # From the first chat's cache in memory, then from a cache saved before the restart.
    for step in ("shared second", "shared after restart"):
        assert script.steps[step].reused_tokens >= 0.9 * system, (name, step)


def test_recurrent_families_do_not_speculate(family):
    name, script, _, _ = family
    if name in RECURRENT:
        assert all(s.drafted_tokens == 0 and "recurrent state" in s.speculation_off for s in _all_turns(script))
    else:
        assert all(not s.speculation_off for s in _all_turns(script))
