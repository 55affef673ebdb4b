"""Speculative decoding: the same greedy ids as plain decoding, the same distribution when
sampling, and the cache invariant (prompt + emitted tokens) however a turn ends."""

import math
from collections import Counter
from unittest.mock import Mock

import mlx.core as mx
import pytest

from engine.context.conversation import ConversationCache
from engine.local.generation import TurnInput, run_turn
from engine.local.prompt_lookup import MAX_MISSES, PromptLookup
from engine.local.speculative import (
    MAX_COPY,
    CopyLength,
    DraftLength,
    Sampling,
    VerifyCost,
)
from engine.types import GenerationParams, speculative_default

CODE = "def f(x): return x * 2 # comment\n" * 3 + "The quick brown fox jumps over the lazy dog. " * 4


@pytest.fixture(scope="session")
def looping_model_path(tmp_path_factory):
    """The tiny model with its projections scaled by 0.4: greedy replies that repeat in part,
    so drafts are accepted, partly accepted and rejected in one reply."""
    from tests.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("looping"))
    weights = mx.load(str(path / "model.safetensors"))
    # Smaller projections than build_tiny_model's make replies loop now and then.
    mx.save_safetensors(
        str(path / "model.safetensors"),
        {k: v * 0.4 if "proj" in k and k.endswith("weight") else v for k, v in weights.items()},
    )
    return path


@pytest.fixture(scope="module")
def looping_model(looping_model_path):
    import mlx_lm

    return mlx_lm.load(str(looping_model_path))


@pytest.fixture
def eager_drafts(monkeypatch):
    """Verification free of cost: the lookup drafts its longest copy whenever it has one, so the
    tests of the generator see drafts accepted, cut short and rejected on the tiny model."""
    from engine.local import speculative

    monkeypatch.setitem(speculative.VERIFY_COST, "cpu", (0.0, 0.0))
    monkeypatch.setitem(speculative.VERIFY_COST, "gpu", (0.0, 0.0))
    monkeypatch.setattr(speculative, "TIME_RATE", 0.0)  # and timings never make it dearer


def prompt_of(tokenizer, text=CODE):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)


def generate(model, tokenizer, prompt_ids, conv=None, capacity=16, stop_after=None, on_delta=None, **params):
    conv = conv or ConversationCache.create(model, capacity)
    deltas = []

    def emit(delta):
        deltas.append(delta)
        if on_delta is not None:
            on_delta(delta)

    stats = run_turn(
        model,
        tokenizer,
        conv,
        TurnInput(list(prompt_ids), 2048),
        GenerationParams(**params),
        lambda: stop_after is not None and len(deltas) >= stop_after,
        emit,
    )
    return stats, conv, deltas


def assert_invariant(conv, stats):
    """The cache holds exactly the prompt plus the emitted tokens, in every layer."""
    assert list(conv.token_ids) == list(stats.prompt_ids) + list(stats.reply_ids)
    assert all(c.offset == len(conv.token_ids) for c in conv.layers)


# --- drafting ------------------------------------------------------------------------


SOURCE = list(range(10, 30))  # the text being edited, then the reply's start: its first three tokens copied


def copying(*reply):
    """A lookup whose reply so far copied SOURCE's first three tokens, then went on with `reply`."""
    lookup = PromptLookup(SOURCE + [0, 10, 11, 12])
    assert lookup.propose(3) == [13, 14, 15]  # in step with the copy
    lookup.extend(reply)
    return lookup


def test_lookup_prefers_the_longest_earlier_match_to_the_latest():
    ids = [5, 6, 1, 2, 3, 40, 41, 7, 8, 9, 1, 2, 3, 30, 31, 99, 5, 6, 1, 2, 3]
    # "1 2 3" last followed by 30 31, but "5 6 1 2 3" occurred earlier, followed by 40 41.
    assert PromptLookup(ids).propose(2) == [40, 41]
    lookup = PromptLookup([1, 2, 3, 9, 9, 4])
    assert lookup.propose(3) == []  # "4" never occurred before
    lookup.extend([2, 3])
    assert lookup.propose(2) == [9, 9]  # the earlier "2 3"; the last n-gram never matches itself
    assert lookup.propose(0) == []


def test_the_copy_position_survives_a_one_token_substitution():
    # 13 renamed to 99: the copy goes on after the token it replaced.
    assert copying(99).propose(3) == [14, 15, 16]
    # The copy itself, accepted on: still in step.
    assert copying(99, 14, 15).propose(2) == [16, 17]


def test_the_copy_position_survives_a_multi_token_substitution():
    assert copying(98, 99).propose(3) == [15, 16, 17]  # 13 14 replaced by two tokens
    assert copying(98, 97, 96, 13).propose(3) == [14, 15, 16]  # three tokens inserted before 13
    assert copying(98, 17).propose(3) == [18, 19, 20]  # 13..16 replaced by one token
    assert copying(*range(100, 100 + MAX_MISSES + 1)).cursor is None  # not an edit any more


def test_a_rename_is_applied_to_later_occurrences_until_the_model_declines_it():
    source = [1, 2, 50, 3, 4, 5, 6, 7, 50, 8, 9, 50, 7]
    lookup = PromptLookup(source + [0, 1, 2])
    lookup.propose(1)
    lookup.extend([60, 61, 3, 4])  # 50 renamed to 60 61, and the copy back in step
    draft = lookup.propose(8)
    assert lookup.substitutions == {(50,): (60, 61)}
    assert draft == [5, 6, 7, 60, 61, 8, 9, 60]
    lookup.judged(3)  # the model kept 50 there: the rename is forgotten
    assert lookup.substitutions == {}
    lookup.extend(draft[:3] + [50])
    assert lookup.propose(3) == [8, 9, 50]


def test_one_token_back_in_step_is_not_yet_a_replacement():
    lookup = PromptLookup([1, 2, 50, 3, 4, 5, 50, 6] + [0, 1, 2])
    lookup.propose(1)
    lookup.extend([60, 3])  # back in step on one token, which may be chance
    assert lookup.substitutions == {}
    assert lookup.propose(5) == [4, 5, 50, 6, 0]  # the draft copies the source as it was
    lookup.extend([4])  # a second token in step: 50 was replaced by 60
    assert lookup.substitutions == {(50,): (60,)}
    assert lookup.propose(3) == [5, 60, 6]


def test_a_replacement_spans_a_chance_match_inside_it():
    source = [1, 2, 50, 51, 52, 3, 4, 5, 50, 51, 52, 6]
    lookup = PromptLookup(source + [0, 1, 2])
    lookup.propose(1)
    lookup.extend([60, 51, 62, 3, 4])  # 50 51 52 -> 60 51 62: the 51 in it matched by chance
    assert lookup.substitutions == {(50, 51, 52): (60, 51, 62)}
    assert lookup.propose(4) == [5, 60, 51, 62]


def test_a_draft_models_length_pauses_when_drafts_fail_and_grows_when_they_hit():
    length = DraftLength(max_draft=8)
    for _ in range(4):
        length.record(length.k or 1, length.k or 1)
    assert length.k == 8
    length.record(8, 3)
    assert length.k == 4
    while length.k:
        length.record(4, 0)
    assert length.rate < 0.3


def test_a_long_match_drafts_long_and_a_one_token_match_not_at_all():
    copy = CopyLength(VerifyCost("cpu"))
    assert copy.size(0) == copy.size(1) == 0
    assert copy.size(20) == MAX_COPY
    assert copy.size(20, room=5) == 5


def test_copies_that_fail_draft_less_and_copies_that_hit_draft_more():
    failing, hitting = CopyLength(VerifyCost("cpu")), CopyLength(VerifyCost("cpu"))
    start = failing.size(3)
    for _ in range(10):
        failing.record(3, failing.size(3) or 1, 0)
        hitting.record(3, hitting.size(3), hitting.size(3))
    assert failing.size(3) == 0 < start < hitting.size(3)


def test_free_guesses_teach_which_matches_to_draft_from():
    copy = CopyLength(VerifyCost("cpu"))
    for _ in range(20):
        copy.guessed(1, True)
    assert copy.size(1) > 0 and copy.size(0) == 0


def test_a_gpu_drafts_where_a_cpu_would_not():
    """Verifying k tokens costs a CPU k times the compute; a GPU little more than one step."""
    assert CopyLength(VerifyCost("gpu")).size(2) > CopyLength(VerifyCost("cpu")).size(2)


def test_passes_timed_slower_than_their_copies_save_stop_drafting_and_fast_ones_keep_it():
    """The reference BLAS computes each drafted token at about the cost of a plain step."""
    slow, fast = VerifyCost("cpu"), VerifyCost("cpu")
    for cost, seconds in ((slow, 0.1 + 9 * 0.1), (fast, 0.1 + 9 * 0.005)):
        for _ in range(10):
            cost.plain(0.1)
            cost.verified(9, seconds)
    assert CopyLength(slow).size(20) == 0
    assert CopyLength(fast).size(20) == MAX_COPY


def test_each_pass_size_is_timed_on_its_own():
    """A CPU's matrix kernels are not linear in the rows fed: here 16 rows ran faster than 9."""
    cost = VerifyCost("cpu")
    for _ in range(10):
        cost.plain(0.1)
        cost.verified(8, 0.1 * 1.94)  # 9 tokens fed
        cost.verified(15, 0.1 * 1.71)  # 16 fed
        cost.verified(7, 0.1 * 1.62)  # 8 fed
    assert cost.extra(15) < cost.extra(8)
    copy = CopyLength(cost)
    assert copy.size(20) == 15  # 16 would be untimed: priced by the line the passes taught


def test_a_pass_is_charged_for_the_pipelining_it_breaks(monkeypatch):
    """A pass waits for the plain step before it, and the step after it has nothing to overlap."""
    from engine.local import speculative

    now = [0.0]
    monkeypatch.setattr(speculative.time, "perf_counter", lambda: now[0])
    cost = VerifyCost("cpu")
    timer = speculative.PassTimer(cost)
    for cycle, drafted in [(0, 0), (0.1, 0), (0.1, 0), (0.1 + 0.15, 8), (0.01, 0), (0.1 + 0.01, 0), (0.1, 0)]:
        now[0] += cycle
        timer.passed(drafted) if drafted else timer.stepped()
    assert cost.step == pytest.approx(0.1)
    # The pass computed 0.15 s and cost the two steps after it 0.01 s each: 1.7 steps, 0.7 extra.
    assert cost.extra(8) == pytest.approx(0.7)


def test_free_text_stays_plain_and_a_copy_drafts_again_once_it_matches():
    from engine.local.speculative import Speculator

    spec = Speculator(list(range(10, 70)), Sampling(0.0, 1.0, 0, 0.0, [], 64))
    # Free text: tokens the prompt never had; the lookup has nothing to offer, steps stay plain.
    for tok in range(100, 140):
        spec.observe(tok)
        assert not spec.drafting
    # Copying the prompt: once the match is long enough to pay, the next step drafts the copy.
    tok = 30
    while not spec.drafting:
        spec.observe(tok)
        tok += 1
    assert tok - 30 <= 4
    draft = spec.draft(tok, room=8)
    assert draft and draft == list(range(tok + 1, tok + 1 + len(draft)))


def test_a_failing_draft_model_pauses_with_a_doubling_back_off():
    from engine.local.speculative import DRAFTER_PAUSE, ModelDrafter, Speculator

    spec = Speculator([1, 2, 3], Sampling(0.0, 1.0, 0, 0.0, [], 64), drafter=Mock(spec=ModelDrafter))
    spec.length.record(2, 0)
    spec.length.record(1, 0)
    assert not spec.drafting
    for pause in (DRAFTER_PAUSE, 2 * DRAFTER_PAUSE):
        for _ in range(pause - 1):
            spec.observe(5)
        assert not spec.drafting
        spec.observe(5)
        assert spec.length.k == 1
        spec.length.record(1, 0)  # one more failure pauses it again, for twice as long
        assert not spec.drafting


def test_the_default_is_one_value_per_backend():
    assert speculative_default("cpu") in (True, False)
    assert speculative_default("gpu") in (True, False)
    assert speculative_default() in (speculative_default("cpu"), speculative_default("gpu"))


# --- identical greedy output ---------------------------------------------------------


@pytest.mark.parametrize("repetition_penalty", [1.0, 1.3])
def test_greedy_ids_are_those_of_plain_decoding_across_growth_and_trims(
    looping_model, repetition_penalty, eager_drafts
):
    model, tokenizer = looping_model
    prompt = prompt_of(tokenizer)
    plain, plain_conv, _ = generate(
        model,
        tokenizer,
        prompt,
        temperature=0.0,
        max_tokens=160,
        repetition_penalty=repetition_penalty,
        speculative=False,
    )
    spec, conv, deltas = generate(
        model,
        tokenizer,
        prompt,
        temperature=0.0,
        max_tokens=160,
        repetition_penalty=repetition_penalty,
        speculative=True,
    )
    assert spec.reply_ids == plain.reply_ids
    assert [t for d in deltas for t in d.token_ids] == list(plain.reply_ids)
    assert plain.drafted_tokens == plain.accepted_tokens == 0
    # Drafts were accepted, and some rejected (trimmed); the cache grew from 16 positions.
    assert 0 < spec.accepted_tokens < spec.drafted_tokens
    assert conv.capacity > 16
    assert_invariant(conv, spec)
    # The kept keys and values are those plain decoding computed.
    for a, b in zip(conv.layers, plain_conv.layers):
        assert mx.allclose(a.get_kv()[0], b.get_kv()[0], atol=1e-4).item()


def test_the_lookup_sees_the_conversation_the_cache_holds_token_by_token(looping_model, eager_drafts):
    """The drafter's ids follow the cache's through plain steps, drafts, rejections and pauses."""
    from engine.local.decoding import TokenSampler, generate_step
    from engine.local.generation import prefill
    from engine.local.speculative import Speculator, speculative_generate_step

    model, tokenizer = looping_model
    prompt = list(prompt_of(tokenizer))
    params = GenerationParams(temperature=0.0)
    replies = []
    for speculate in (False, True):
        conv = ConversationCache.create(model, 16)
        sampling = TokenSampler(params, prompt)
        logits, _, _ = prefill(model, conv, prompt)
        y = sampling.sample(logits)
        if speculate:
            spec = Speculator(prompt, Sampling(0.0, 1.0, 0, 0.0, [], 64))
            tokens = speculative_generate_step(model, conv, y, sampling, spec, room=120)
        else:
            tokens = generate_step(model, conv, y, sampling)
        reply = []
        for tok in tokens:
            reply.append(tok)
            assert conv.token_ids == prompt + reply
            if speculate:
                # At most the pending token and the accepted draft not yet taken run ahead.
                assert spec.index.ids[: len(conv.token_ids)] == conv.token_ids
            if len(reply) == 120:
                break
        tokens.close()
        replies.append(reply)
    assert replies[0] == replies[1]
    assert 0 < spec.accepted < spec.drafted


def test_max_tokens_ending_inside_an_accepted_draft_keeps_the_cache_exact(looping_model):
    model, tokenizer = looping_model
    prompt = prompt_of(tokenizer)
    full, _, _ = generate(model, tokenizer, prompt, temperature=0.0, max_tokens=60, speculative=False)
    accepted = 0
    for n in range(1, 60, 3):
        spec, conv, _ = generate(model, tokenizer, prompt, temperature=0.0, max_tokens=n, speculative=True)
        assert spec.reply_ids == full.reply_ids[:n] and spec.finish_reason == "length"
        assert_invariant(conv, spec)
        accepted += spec.accepted_tokens
    assert accepted


def test_eos_and_stop_inside_an_accepted_draft(looping_model, eager_drafts):
    model, tokenizer = looping_model
    prompt = prompt_of(tokenizer)
    full, _, _ = generate(model, tokenizer, prompt, temperature=0.0, max_tokens=80, speculative=False)
    saved = set(tokenizer.eos_token_ids)
    stopped_in_draft = 0
    try:
        # Every token of the reply as the EOS in turn: some are inside accepted drafts.
        for eos in sorted(set(full.reply_ids[10:])):
            tokenizer.eos_token_ids = {eos}
            expected = full.reply_ids[: full.reply_ids.index(eos) + 1]
            spec, conv, _ = generate(model, tokenizer, prompt, temperature=0.0, max_tokens=80, speculative=True)
            assert spec.reply_ids == expected and spec.finish_reason == "stop"
            assert_invariant(conv, spec)
            stopped_in_draft += spec.accepted_tokens > 0 and conv.layers[0].peak > conv.offset
    finally:
        tokenizer.eos_token_ids = saved
    assert stopped_in_draft
    # Stop (Esc) lands within one verified step: the cache keeps only what was emitted.
    spec, conv, deltas = generate(
        model, tokenizer, prompt, temperature=0.0, max_tokens=80, speculative=True, stop_after=41
    )
    assert spec.finish_reason == "cancelled" and len(spec.reply_ids) == 41
    assert spec.reply_ids == full.reply_ids[:41]
    assert_invariant(conv, spec)


def test_follow_up_turn_reuses_the_cache_and_matches_a_fresh_plain_computation(looping_model):
    model, tokenizer = looping_model
    first, conv, _ = generate(model, tokenizer, prompt_of(tokenizer), temperature=0.0, max_tokens=50, speculative=True)
    reply = tokenizer.decode(list(first.reply_ids))
    messages = [
        {"role": "user", "content": CODE},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "Again: " + CODE},
    ]
    follow = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    second, conv, _ = generate(model, tokenizer, follow, conv=conv, temperature=0.0, max_tokens=50, speculative=True)
    fresh, _, _ = generate(model, tokenizer, follow, temperature=0.0, max_tokens=50, speculative=False)
    assert second.reused_tokens > 0 and second.reply_ids == fresh.reply_ids
    assert_invariant(conv, second)


def test_the_first_token_comes_before_any_draft_is_checked(looping_model, eager_drafts):
    model, tokenizer = looping_model
    prompt = list(range(tokenizer.vocab_size)) + prompt_of(tokenizer)  # a draft after any first token
    passes = []  # forward calls after the prompt, by tokens fed

    def forward(x, cache=None):
        if cache[0].offset >= len(prompt):
            passes.append(x.shape[1])
        return model(x, cache=cache)

    counting = Mock(spec=model, side_effect=forward)
    seen_at_first = []
    stats, _, _ = generate(
        counting,
        tokenizer,
        prompt,
        conv=ConversationCache.create(model, 512),
        on_delta=lambda _delta: seen_at_first or seen_at_first.append(list(passes)),
        temperature=0.0,
        max_tokens=60,
        speculative=True,
    )
    assert stats.accepted_tokens > 0  # verification did happen, later
    assert seen_at_first and all(n == 1 for n in seen_at_first[0])  # not after a pass of a draft


def test_an_error_inside_verification_repairs_the_cache(looping_model):
    model, tokenizer = looping_model
    prompt = prompt_of(tokenizer)

    def forward(x, cache=None):
        # The first multi-token pass after the prompt is a verification.
        if x.shape[1] > 1 and cache[0].offset > len(prompt):
            raise RuntimeError("out of memory")
        return model(x, cache=cache)

    failing = Mock(spec=model, side_effect=forward)
    conv = ConversationCache.create(model, 16)
    stats, conv, _ = generate(failing, tokenizer, prompt, conv=conv, temperature=0.0, max_tokens=80, speculative=True)
    assert stats.finish_reason == "error" and "out of memory" in stats.error
    assert stats.generated_tokens > 0
    assert_invariant(conv, stats)


# --- sampling: the distribution is unchanged -----------------------------------------


def test_acceptance_rule_keeps_the_processed_distribution():
    """Draft token accepted with p(d), else a sample from p without d: the result is p."""
    mx.random.seed(7)
    logits = mx.array([[2.0, 1.5, 1.0, 0.2, -1.0, -3.0]] * 2)
    sampling = Sampling(temperature=0.8, top_p=0.95, top_k=4, min_p=0.0, processors=[], context=64)
    logprobs = sampling.process(logits, None, [0, 1])
    filtered = logprobs
    for f in sampling.filters:
        filtered = f(filtered)
    p = mx.softmax(filtered[0] * (1 / 0.8)).tolist()
    n = 2500
    for draft in ([1], [4]):  # a likely draft token, and one the filters removed
        counts = Counter()
        for _ in range(n):
            verdict = sampling.judge(logprobs, draft)
            counts[draft[0] if verdict.accepted else verdict.next_token] += 1
        chi2 = sum((counts[i] - n * p[i]) ** 2 / (n * p[i]) for i in range(len(p)) if p[i] > 0)
        assert all(counts[i] == 0 for i in range(len(p)) if p[i] == 0)
        assert chi2 < 20.5  # 99.9th percentile of chi-square, 3 degrees of freedom (4 tokens kept)


def test_sampled_replies_have_the_distribution_of_plain_decoding(looping_model, eager_drafts):
    """Seeded: the first three tokens' joint distribution, with speculation against the exact one
    (the first token is a plain step's; the third is the first a verification can give)."""
    model, tokenizer = looping_model
    # Every token occurs in the prompt, so every token has a draft to verify after it.
    prompt = list(range(tokenizer.vocab_size)) + prompt_of(tokenizer)
    eos = set(tokenizer.eos_token_ids)
    params = dict(temperature=1.0, top_k=3, max_tokens=3)

    def after(ids):
        return _top_k_probs(model(mx.array(ids)[None], cache=ConversationCache.create(model, 512).layers)[0, -1], 3)

    exact = {}

    def walk(reply, p):
        if len(reply) == 3 or (reply and reply[-1] in eos):
            exact[tuple(reply)] = p
            return
        for t, q in after(prompt + reply).items():
            walk(reply + [t], p * q)

    walk([], 1.0)
    conv = ConversationCache.create(model, 512)
    counts, drafted, n = Counter(), 0, 600
    for seed in range(n):
        stats, conv, _ = generate(model, tokenizer, prompt, conv=conv, seed=seed, speculative=True, **params)
        counts[tuple(stats.reply_ids)] += 1
        drafted += stats.drafted_tokens
        assert_invariant(conv, stats)
    assert drafted > n // 2  # the third token went through verification
    assert set(counts) <= set(exact)
    # Cells expected fewer than 5 times are pooled into one, as a chi-square test needs.
    big = {k: q for k, q in exact.items() if n * q >= 5}
    cells = [(counts[k], n * q) for k, q in big.items()]
    rest = 1.0 - sum(big.values())
    if rest > 0:
        cells.append((n - sum(c for c, _ in cells), n * rest))
    chi2 = sum((c - e) ** 2 / e for c, e in cells)
    df = len(cells) - 1
    assert chi2 < df + 4 * math.sqrt(2 * df) + 10


def _top_k_probs(logits, k):
    values = logits.tolist()
    top = sorted(range(len(values)), key=lambda i: -values[i])[:k]
    z = sum(math.exp(values[i]) for i in top)
    return {i: math.exp(values[i]) / z for i in top}


# --- the switches and the stats --------------------------------------------------------


def test_replay_prints_the_counts_and_no_speculative_gives_the_same_ids(
    tmp_path, looping_model_path, capsys, eager_drafts
):
    import json

    from app.cli.main import main

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"system": "", "turns": [CODE, "Again: " + CODE]}))
    args = ["replay", str(script), "--model", str(looping_model_path), "--max-tokens", "60"]
    assert main(args) == 0
    on = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(args + ["--no-speculative"]) == 0
    off = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["reply_ids"] for t in on] == [t["reply_ids"] for t in off]
    assert all(t["drafted_tokens"] == t["accepted_tokens"] == 0 for t in off)
    if speculative_default("cpu"):
        assert sum(t["accepted_tokens"] for t in on) > 0
    assert all(0 <= t["accepted_tokens"] <= t["drafted_tokens"] for t in on)


@pytest.mark.qt
def test_window_shows_the_acceptance_rate_and_preferences_turn_it_off(qtbot, qloop, looping_model_path, eager_drafts):
    from app.core.settings import DEFAULTS_KEY
    from tests.app.gui.test_window_engine import close_window, open_window, send

    store, window = open_window(qtbot, looping_model_path)
    store.set_state(DEFAULTS_KEY, {"max_tokens": 60, "temperature": 0.0, "speculative": True})
    send(qtbot, window, CODE)
    reply = store.get_conversation(window.chat.conv_id).messages[-1]
    drafted, accepted = reply.stats["drafted_tokens"], reply.stats["accepted_tokens"]
    assert 0 < accepted <= drafted
    tip = window.chat_view.message_widgets()[-1].stats_label.toolTip()
    assert tip == f"Speculative decoding: {accepted} of {drafted} drafted tokens accepted ({accepted / drafted:.0%})"

    prefs = window.dialogs.preferences_dialog()
    assert prefs.speculative.isChecked()
    prefs.speculative.setChecked(False)
    prefs.accept()
    send(qtbot, window, "Again: " + CODE)
    reply = store.get_conversation(window.chat.conv_id).messages[-1]
    assert reply.status == "complete" and reply.stats["drafted_tokens"] == 0
    assert window.chat_view.message_widgets()[-1].stats_label.toolTip() == ""
    close_window(qtbot, store, window)


# --- a draft model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def draft_pair(tmp_path_factory, looping_model_path):
    """A second tiny model with the same tokenizer (other weights), and one whose tokenizer differs."""
    import shutil

    from tests.tiny_model import build_tiny_model, build_tokenizer

    other = build_tiny_model(tmp_path_factory.mktemp("draft-other"), seed=1)
    same = tmp_path_factory.mktemp("draft-same") / "model"
    shutil.copytree(looping_model_path, same)
    foreign = build_tiny_model(tmp_path_factory.mktemp("draft-foreign"), seed=2)
    build_tokenizer(vocab_size=300).save(str(foreign / "tokenizer.json"))
    return {"other": other, "same": same, "foreign": foreign}


def engine_turns(model_path, turns, **params):
    """Replies (TurnStats) of a few turns of one conversation on a fresh Engine, and its session."""
    import asyncio

    from engine import Engine, TextDelta, TurnStats

    async def main():
        engine = Engine()
        try:
            await engine.load_model(str(model_path))
            messages, out = [], []
            for text in turns:
                messages.append({"role": "user", "content": text})
                parts, stats = [], None
                async for ev in engine.chat("c", messages, GenerationParams(**params)):
                    if isinstance(ev, TurnStats):
                        stats = ev
                    elif isinstance(ev, TextDelta):  # not the prefill's progress events
                        parts.append(ev.text)
                messages.append({"role": "assistant", "content": "".join(parts)})
                out.append(stats)
            return out, engine._local.session
        finally:
            await engine.close()

    return asyncio.run(main())


@pytest.mark.parametrize("draft", ["same", "other"])
def test_a_draft_model_gives_the_ids_of_plain_decoding_and_its_cache_follows(looping_model_path, draft_pair, draft):
    turns = [CODE, "Again: " + CODE]
    plain, _ = engine_turns(looping_model_path, turns, temperature=0.0, max_tokens=40, speculative=False)
    drafted, session = engine_turns(
        looping_model_path, turns, temperature=0.0, max_tokens=40, draft_model=str(draft_pair[draft])
    )
    assert [s.reply_ids for s in drafted] == [s.reply_ids for s in plain]
    assert all(s.drafted_tokens > 0 for s in drafted)
    if draft == "same":  # the same weights draft what the model says
        assert sum(s.accepted_tokens for s in drafted) >= 0.9 * sum(s.drafted_tokens for s in drafted)
    else:
        assert sum(s.accepted_tokens for s in drafted) < sum(s.drafted_tokens for s in drafted)
    # The draft cache holds a prefix of the main one's ids, nothing else (it lags while a
    # failing draft model is paused).
    main, cache = session.caches.get("c"), session.caches.draft("c")
    assert cache.token_ids == main.token_ids[: len(cache.token_ids)]
    # The draft model's cache is under the memory budget and in the report.
    report = session.caches.report()
    assert report.draft_caches == 1 and report.draft_bytes == cache.nbytes > 0
    assert all(c.offset == len(cache.token_ids) for c in cache.layers)
    if draft == "same":
        assert len(cache.token_ids) >= len(main.token_ids) - 1


def test_a_draft_model_with_another_vocabulary_is_refused(looping_model_path, draft_pair, tmp_path, capsys):
    import json

    from app.cli.main import main
    from engine import ChinwagError

    with pytest.raises(ChinwagError, match="vocabularies differ"):
        engine_turns(
            looping_model_path, ["Hello"], temperature=0.0, max_tokens=4, draft_model=str(draft_pair["foreign"])
        )
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": ["Hello"]}))
    code = main(
        ["replay", str(script), "--model", str(looping_model_path), "--draft-model", str(draft_pair["foreign"])]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "vocabularies differ" in err and "draft model" in err
    code = main(["replay", str(script), "--model", str(looping_model_path), "--draft-model", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("chinwag: error: draft model: ") and "nope" in err


@pytest.mark.qt
def test_window_draft_model_setting_drafts_and_a_foreign_one_fails_the_reply(
    qtbot, qloop, looping_model_path, draft_pair
):
    from tests.app.gui.test_window_engine import close_window, open_window, send

    store, window = open_window(qtbot, looping_model_path)
    send(qtbot, window, "Hello")
    conv_id = window.chat.conv_id
    dialog = window.dialogs.chat_settings_dialog()
    assert dialog.draft_model.text() == ""
    dialog.fields["temperature"].setValue(0.0)
    dialog.fields["max_tokens"].setValue(30)
    dialog.draft_model.setText(str(draft_pair["same"]))
    dialog.accept()
    assert store.get_conversation(conv_id).settings["draft_model"] == str(draft_pair["same"])
    send(qtbot, window, CODE)
    reply = store.get_conversation(conv_id).messages[-1]
    assert reply.status == "complete" and reply.stats["drafted_tokens"] > 0
    assert "drafted tokens accepted" in window.chat_view.message_widgets()[-1].stats_label.toolTip()

    window.dialogs.save_chat_settings(
        conv_id, {**window.dialogs.chat_settings_dialog().values(), "draft_model": str(draft_pair["foreign"])}
    )
    send(qtbot, window, "Once more")
    reply = store.get_conversation(conv_id).messages[-1]
    assert reply.status == "failed"
    assert any("vocabularies differ" in t for t in window.notices.texts())
    close_window(qtbot, store, window)


def test_a_gguf_draft_model_with_another_vocabulary_is_refused_before_it_is_imported(
    looping_model_path, tmp_path, chinwag_home
):
    import json

    from engine import ChinwagError, paths
    from tests.engine.models.gguf.test_importer import write_tiny_gguf

    vocab = json.loads((looping_model_path / "tokenizer.json").read_text())["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    tokens[-3:] = ["only-in-the-draft-1", "only-in-the-draft-2", "only-in-the-draft-3"]
    foreign = write_tiny_gguf(
        looping_model_path, tmp_path / "Foreign.F32.gguf", meta_overrides={"tokenizer.ggml.tokens": tokens}
    )
    with pytest.raises(ChinwagError) as e:
        engine_turns(looping_model_path, ["Hello"], temperature=0.0, max_tokens=4, draft_model=str(foreign))
    message = str(e.value)
    assert message.startswith("draft model Foreign.F32.gguf cannot draft for ") and "\n" not in message
    assert "vocabularies differ (same size, different tokens)" in message and "nothing imported" in message
    models = paths.models_dir()
    assert not models.exists() or not any(models.iterdir())  # nothing was written
    # A GGUF with the same vocabulary passes the header check, is imported and drafts.
    same = write_tiny_gguf(looping_model_path, tmp_path / "Same.F32.gguf")
    [stats], _ = engine_turns(looping_model_path, [CODE], temperature=0.0, max_tokens=12, draft_model=str(same))
    assert stats.drafted_tokens > 0 and any(models.iterdir())
