"""Points 4 and 5 of issue 9: prefill while the user types, and the next window prepared while
they read; both low priority, preempted within one chunk, never changing a reply."""

import asyncio
import threading

import pytest

from engine import BackgroundPrefill, Engine, GenerationParams, PrefillProgress
from engine.context.conversation import common_prefix
from engine.local import generation
from tests.engine.test_api import GREEDY, reference, turn

LONG = "The quick brown fox jumps over the lazy dog. " * 30


def draft(text, history=()):
    return list(history) + [{"role": "user", "content": text}]


async def cache_state(engine, conv_id):
    """(tokens held by the cache's layers, len(token_ids)), read on the engine thread."""

    def read():
        conv = engine._local.session.caches.get(conv_id)
        return (conv.offset, len(conv.token_ids)) if conv else (0, 0)

    return await engine._local.call(read)


def hold_model(monkeypatch, engine, until):
    """Make the model's first call wait (on the engine thread) until `until()` holds."""
    model = engine._local.session.model
    real = type(model).__call__
    calls = {"n": 0}
    entered = threading.Event()

    def held(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            entered.set()
            for _ in range(2000):
                if until():
                    break
                threading.Event().wait(0.005)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(model), "__call__", held)
    return entered, lambda: monkeypatch.setattr(type(model), "__call__", real)


def test_prefilled_draft_leaves_one_token_for_enter_and_the_same_reply(engine_with, tiny_model):
    model, tokenizer = tiny_model
    history = [{"role": "system", "content": "Be brief."}]

    async def body(engine):
        ahead = await engine.prefill("d", draft(LONG, history), GREEDY)
        _, sent = await turn(engine, "d", draft(LONG, history))
        _, cold = await turn(engine, "cold", draft(LONG, history))
        # The user kept typing after the pause: only the changed tail is computed.
        await engine.prefill("e", draft(LONG, history), GREEDY)
        _, changed = await turn(engine, "e", draft(LONG + "Why?", history))
        return ahead, sent, cold, changed

    ahead, sent, cold, changed = engine_with(body)
    assert isinstance(ahead, BackgroundPrefill) and ahead.finished
    assert ahead.computed_tokens == ahead.prompt_tokens == len(sent.prompt_ids) - 1
    assert sent.reused_tokens == len(sent.prompt_ids) - 1 and sent.prefilled_tokens == 1
    assert sent.reply_ids == cold.reply_ids and sent.prompt_ids == cold.prompt_ids
    assert cold.reused_tokens == len(cold.prompt_ids) - 1  # a new chat: the same prompt, shared from "d"'s cache
    assert list(sent.reply_ids) == reference(model, list(sent.prompt_ids), 12, tokenizer.eos_token_ids)
    # Everything before the edit point is reused; the reply still equals a fresh computation.
    assert changed.reused_tokens == common_prefix(sent.prompt_ids[:-1], changed.prompt_ids)
    assert changed.reused_tokens > len(sent.prompt_ids) - 16 and changed.prefilled_tokens < 24
    assert list(changed.reply_ids) == reference(model, list(changed.prompt_ids), 12, tokenizer.eos_token_ids)


def test_a_chat_preempts_the_draft_within_one_chunk_and_reuses_it(engine_with, tiny_model, monkeypatch):
    model, tokenizer = tiny_model

    async def body(engine):
        entered, restore = hold_model(monkeypatch, engine, lambda: engine._local.thread.waiting())
        background = asyncio.ensure_future(engine.prefill("c", draft(LONG)))
        await asyncio.to_thread(entered.wait, 30)
        _, stats = await turn(engine, "c", draft(LONG))  # Enter while the draft is being read
        restore()
        result = await background
        return result, stats, await cache_state(engine, "c")

    result, stats, (offset, held) = engine_with(body)
    assert not result.finished and result.computed_tokens == generation.PREFILL_FIRST_STEP
    assert stats.reused_tokens == generation.PREFILL_FIRST_STEP
    assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)
    assert offset == held == len(stats.prompt_ids) + len(stats.reply_ids)


def test_a_newer_draft_preempts_the_older_one(engine_with, monkeypatch):
    async def body(engine):
        entered, restore = hold_model(monkeypatch, engine, lambda: engine._local.thread.waiting())
        older = asyncio.ensure_future(engine.prefill("n", draft(LONG)))
        await asyncio.to_thread(entered.wait, 30)
        newer = await engine.prefill("n", draft(LONG + "And more."))
        restore()
        return await older, newer, await cache_state(engine, "n")

    older, newer, (offset, held) = engine_with(body)
    assert not older.finished and older.computed_tokens == generation.PREFILL_FIRST_STEP
    assert newer.finished and newer.reused_tokens >= generation.PREFILL_FIRST_STEP
    assert offset == held == newer.prompt_tokens


def test_stop_and_model_load_cancel_background_work(engine_with, tiny_model_path, monkeypatch):
    async def body(engine):
        results = []
        for cancel in (lambda: engine.stop(), lambda: asyncio.ensure_future(engine.load_model(str(tiny_model_path)))):
            entered, restore = hold_model(monkeypatch, engine, lambda: engine._local.background_cancelled())
            background = asyncio.ensure_future(engine.prefill("s", draft(LONG)))
            await asyncio.to_thread(entered.wait, 30)
            pending = cancel()
            results.append(await background)
            restore()
            if pending is not None:
                await pending
        _, stats = await turn(engine, "s", draft("still fine?"))
        return results, stats

    results, stats = engine_with(body)
    assert [r.finished for r in results] == [False, False]
    assert all(r.computed_tokens <= generation.PREFILL_FIRST_STEP for r in results)
    assert stats.finish_reason in ("stop", "length")


def test_no_background_prefill_while_a_reply_generates(engine_with, monkeypatch):
    async def body(engine):
        seen = {}

        async def reply():
            last = None
            async for ev in engine.chat("g", draft("Tell me a story"), GenerationParams(temperature=0, max_tokens=40)):
                last = ev
                if "busy" not in seen:
                    seen["busy"] = await engine.prefill("other", draft(LONG))
            return last

        stats = await reply()
        return seen["busy"], stats, await cache_state(engine, "other")

    busy, stats, other = engine_with(body)
    assert not busy.finished and busy.computed_tokens == 0 and "busy" in busy.reason
    assert other == (0, 0)  # nothing was computed for the draft
    assert stats.generated_tokens > 1


def test_a_draft_too_long_for_the_context_is_skipped_quietly(engine_with):
    async def body(engine):
        return await engine.prefill("x", draft("word " * 100), GenerationParams(context_cap=20))

    result = engine_with(body)
    assert not result.finished and "context limit is 20" in result.reason


# --- point 4: the next window, prepared while the user reads -------------------------------

CAP = GenerationParams(temperature=0.0, max_tokens=8, context_cap=400)


def near_limit_chat():
    history = [{"role": "system", "content": "Be brief."}]
    for i in range(5):
        history += [
            {"role": "user", "content": f"Question {i}: what is the capital of France?"},
            {"role": "assistant", "content": f"Answer {i}: the capital of France is Paris."},
        ]
    return history


async def fill_to_limit(engine, conv):
    """Turns until the next one has to drop old turns; returns the messages."""
    from engine.local.background import next_window

    messages = near_limit_chat()
    for i in range(40):
        messages = messages + [{"role": "user", "content": f"And number {i}?"}]
        text, stats = await turn(engine, conv, messages, CAP)
        messages = messages + [{"role": "assistant", "content": text}]
        if await engine._local.call(next_window, engine._local.session, conv, messages, CAP) is not None:
            return messages
    raise AssertionError("the chat never came near its limit")


def test_the_next_window_is_prepared_after_a_turn_near_the_limit(tiny_model_path, tiny_model):
    model, tokenizer = tiny_model
    last = {"role": "user", "content": "What is the capital of Spain?"}

    async def run(idle_work, turns=None):
        engine = Engine(idle_work=idle_work)
        conv = f"w-{idle_work}"  # caches saved on close must not carry over to the other run
        try:
            await engine.load_model(str(tiny_model_path))
            messages, prepared = near_limit_chat(), []
            for i in range(turns or 40):
                messages = messages + [{"role": "user", "content": f"And number {i}?"}]
                text, _ = await turn(engine, conv, messages, CAP)
                messages = messages + [{"role": "assistant", "content": text}]
                prepared.append(await engine.wait_background())
                if turns is None and prepared[-1].computed_tokens:
                    break
            _, nxt = await turn(engine, conv, messages + [last], CAP)
            return prepared, nxt
        finally:
            await engine.close()

    prepared, warm = asyncio.run(run(True))
    none, cold = asyncio.run(run(False, len(prepared)))
    assert set(none) == {None}
    # Until the chat nears its limit, there is nothing to prepare.
    assert all(p.finished and p.computed_tokens == 0 for p in prepared[:-1])
    assert prepared[-1].finished and prepared[-1].computed_tokens > 0
    # Both slid the window (the prepared one from a guess at the next message's size).
    assert warm.dropped_messages > 0 and cold.dropped_messages > 0
    assert list(cold.reply_ids) == reference(model, list(cold.prompt_ids), 8, tokenizer.eos_token_ids)
    assert list(warm.reply_ids) == reference(model, list(warm.prompt_ids), 8, tokenizer.eos_token_ids)
    # The turn computed only what follows the prepared window: the new message.
    assert warm.reused_tokens == prepared[-1].reused_tokens + prepared[-1].computed_tokens
    assert warm.prefilled_tokens * 3 < cold.prefilled_tokens


def test_another_conversations_turn_preempts_the_window_preparation(engine_with, monkeypatch):
    async def body(engine):
        messages = await fill_to_limit(engine, "a")
        entered, restore = hold_model(monkeypatch, engine, lambda: engine._local.thread.waiting())
        background = engine._local.start_background(engine._local.session_prepare, "a", messages, CAP)  # as chat() does
        await asyncio.to_thread(entered.wait, 30)
        _, other = await turn(engine, "b", draft("Hello there"), CAP)
        restore()
        prepared = await asyncio.wrap_future(background)
        return prepared, other, await cache_state(engine, "a")

    prepared, other, (offset, held) = engine_with(body, idle_work=False)
    assert other.finish_reason in ("stop", "length")
    assert not prepared.finished and 0 < prepared.computed_tokens <= generation.PREFILL_FIRST_STEP
    assert offset == held


def test_replay_pause_lets_the_next_window_be_prepared(tiny_model_path, tmp_path, capsys):
    import json

    from app.cli.main import main

    script = tmp_path / "long.json"
    # A turn adds 41 tokens: the 7th (293) slides past the cap and keeps the turn before it (88 <= 0.35 * 272),
    # so the window prepared in the pause before it reads that turn again. Each pause is a second slept.
    turns = [f"Question {i}: what is the capital of France?" for i in range(7)]
    script.write_text(json.dumps({"system": "Be brief.", "turns": turns}))
    common = ["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "8", "--context-cap", "280"]
    runs = []
    for extra in ([], ["--pause", "1"]):
        assert main(common + extra) == 0
        runs.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    worst, paused = runs
    assert [t["reply_ids"] for t in worst] == [t["reply_ids"] for t in paused]
    assert [t["prompt_ids"] for t in worst] == [t["prompt_ids"] for t in paused]
    dropped = [i for i, t in enumerate(paused) if t["dropped_messages"]]
    assert dropped, "the window never slid"
    i = dropped[0]
    assert paused[i]["prepared_tokens"] > 0 and all(t["prepared_tokens"] == 0 for t in worst)
    # The slide was computed while the reader read: the turn itself computed only its new tokens.
    assert paused[i]["reused_tokens"] == worst[i]["reused_tokens"] + paused[i]["prepared_tokens"]
    assert paused[i]["prefilled_tokens"] == worst[i]["prefilled_tokens"] - paused[i]["prepared_tokens"]


def test_replay_pause_must_be_seconds(tmp_path, capsys):
    from app.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["replay", str(tmp_path / "x.json"), "--model", "m", "--pause", "soon"])
    assert info.value.code == 2 and "must be a number of seconds" in capsys.readouterr().err


def test_a_failure_mid_draft_leaves_the_cache_exact_and_reaches_the_caller(engine_with, tiny_model, monkeypatch):
    model, tokenizer = tiny_model

    async def body(engine):
        real = type(engine._local.session.model).__call__
        calls = {"n": 0}

        def flaky(self, *args, **kwargs):
            out = real(self, *args, **kwargs)  # the layers took the chunk's keys and values...
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("simulated failure")  # ...but the chunk never completed
            return out

        monkeypatch.setattr(type(engine._local.session.model), "__call__", flaky)
        failed = ""
        try:
            await engine.prefill("f", draft(LONG))
        except RuntimeError as e:
            failed = str(e)
        monkeypatch.setattr(type(engine._local.session.model), "__call__", real)
        state = await cache_state(engine, "f")
        _, stats = await turn(engine, "f", draft(LONG))
        return failed, state, stats

    failed, (offset, held), stats = engine_with(body)
    assert failed == "simulated failure"  # a bug is not swallowed
    assert offset == held == generation.PREFILL_FIRST_STEP  # the first chunk, exactly
    assert stats.reused_tokens == generation.PREFILL_FIRST_STEP
    assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)


def test_a_drafts_cache_is_adopted_by_the_chat_created_for_it(engine_with):
    async def body(engine):
        read = await engine.prefill("draft", draft(LONG))
        moved = await engine.adopt("draft", "saved-chat")
        missing = await engine.adopt("draft", "other")  # already handed over
        _, stats = await turn(engine, "saved-chat", draft(LONG))
        return read, moved, missing, stats, await cache_state(engine, "draft")

    read, moved, missing, stats, left = engine_with(body)
    assert read.finished and moved and not missing and left == (0, 0)
    assert stats.reused_tokens == len(stats.prompt_ids) - 1 and stats.prefilled_tokens == 1


def test_close_right_after_a_chat_near_its_limit_logs_no_bug(tiny_model_path, chinwag_home):
    """Issue 15: close while the next window's preparation is queued (or running) is no bug."""
    from engine import log
    from tests.conftest import run_with_engine

    path = log.setup()
    params = GenerationParams(temperature=0.0, max_tokens=8, context_cap=120)
    jobs = []

    async def body(engine, wait):
        messages = [{"role": "system", "content": "Be brief."}]
        for text in ("Tell me about foxes.", "And dogs?", "And cats?"):
            messages.append({"role": "user", "content": text + " " + LONG[:90]})
            reply, _ = await turn(engine, "near", messages, params)
            messages.append({"role": "assistant", "content": reply})
        jobs.append(engine._local._background)  # the next window's preparation, queued
        if wait:
            return await engine.wait_background()
        return None  # close at once

    prepared = run_with_engine(tiny_model_path, lambda e: body(e, True))
    # The chat is near its limit: the job plans the next window (a slide), it is not "the next turn fits".
    assert prepared.finished and prepared.prompt_tokens > 0 and prepared.reason == "", prepared
    for _ in range(3):
        run_with_engine(tiny_model_path, lambda e: body(e, False))
    assert all(job is not None and job.done() and job.exception() is None for job in jobs)
    text = path.read_text()
    assert "Traceback" not in text and "bug" not in text.lower(), text


def test_a_changed_system_prompt_is_read_ahead_and_the_next_turn_reuses_it_exactly(engine_with, tiny_model):
    """Issue 15 §1: the history under new instructions is read before Enter, with progress; the
    reply then equals a fresh computation of the same prompt."""
    model, tokenizer = tiny_model
    question = {"role": "user", "content": "And the dog?"}

    async def body(engine):
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
        text, _ = await turn(engine, "c", chat)
        await turn(engine, "unread", chat)  # the same chat, whose change is not read ahead
        chat.append({"role": "assistant", "content": text})
        changed = [{"role": "system", "content": "Answer like a pirate, always."}] + chat[1:]
        seen = []
        ahead = await engine.prefill("c", changed, GREEDY, seen.append)
        _, sent = await turn(engine, "c", changed + [question])
        _, unread = await turn(engine, "unread", changed + [question])
        return ahead, seen, sent, unread

    ahead, seen, sent, unread = engine_with(body, idle_work=False)
    assert ahead.finished and ahead.computed_tokens > 100  # the chat was re-read, not just the system prompt
    # Progress on this loop, every id of the earlier messages: it says "re-reading the chat".
    assert seen and seen[-1].done == seen[-1].total == ahead.computed_tokens
    assert all(p.history_tokens == p.total for p in seen) and seen[0].rereading
    # Enter then reads only the new question (and the template around it).
    assert sent.reused_tokens == ahead.prompt_tokens
    assert (
        sent.prefilled_tokens == len(sent.prompt_ids) - ahead.prompt_tokens < 40
    )  # a dozen characters, tiny vocabulary
    assert list(sent.reply_ids) == reference(model, list(sent.prompt_ids), 12, tokenizer.eos_token_ids)
    # Reading ahead changes only when the work is done: the same prompt, the same reply.
    assert sent.prompt_ids == unread.prompt_ids and sent.reply_ids == unread.reply_ids
    assert unread.prefilled_tokens > 100


def test_a_turn_that_rereads_the_chat_says_so_in_its_progress(engine_with):
    async def body(engine):
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
        text, _ = await turn(engine, "c", chat)
        changed = [{"role": "system", "content": "Be long."}, chat[1], {"role": "assistant", "content": text}]
        events = []
        async for ev in engine.chat("c", changed + [{"role": "user", "content": "More?"}], GREEDY):
            events.append(ev)
        return [e for e in events if isinstance(e, PrefillProgress)]

    progress = engine_with(body, idle_work=False)
    assert progress[0].rereading and 0 < progress[0].history_tokens < progress[0].total
    assert not progress[-1].rereading  # the new message is read last


def test_a_new_chats_first_read_is_not_called_a_re_read(engine_with):
    async def body(engine):
        events = []
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]
        async for ev in engine.chat("new", chat, GREEDY):
            events.append(ev)
        return [e for e in events if isinstance(e, PrefillProgress)]

    progress = engine_with(body, idle_work=False)
    assert len(progress) > 1 and not any(p.rereading or p.history_tokens for p in progress)


def held(p: PrefillProgress) -> tuple:
    """(the prompt's ids in the cache, all of them) from a read ahead's progress."""
    return p.prompt_tokens - p.total + p.done, p.prompt_tokens


def test_prefill_reports_progress_on_the_loop(engine_with, monkeypatch):
    monkeypatch.setattr(generation, "PREFILL_FIRST_STEP", 16)  # several chunks for a short draft
    monkeypatch.setattr(generation, "PREFILL_CHUNK_SECONDS", 0.0)  # chunks never grow

    async def body(engine):
        loop, seen = asyncio.get_running_loop(), []

        def progress(p):
            assert asyncio.get_running_loop() is loop  # called on the loop, not the engine thread
            seen.append(held(p))

        ahead = await engine.prefill("p", draft(LONG), GREEDY, progress=progress)
        await asyncio.sleep(0)  # callbacks scheduled by the engine thread run before this resumes
        again: list = []
        await engine.prefill("p", draft(LONG), GREEDY, progress=lambda p: again.append(held(p)))
        await asyncio.sleep(0)
        return ahead, seen, again

    ahead, seen, again = engine_with(body)
    total = ahead.prompt_tokens
    assert seen[0] == (0, total) and seen[-1] == (total, total) and len(seen) > 3
    assert [h for h, _ in seen] == sorted(h for h, _ in seen) and {t for _, t in seen} == {total}
    assert again == [(total, total)]  # already read: one report, all of it held
