"""Issue 15 §1: Fork from Here copies the parent's cache up to the fork point, exactly."""

from engine import ForkedCache
from tests.engine.local.test_background import cache_state
from tests.engine.test_api import GREEDY, reference, turn

SYSTEM = {"role": "system", "content": "Be brief."}


def user(text):
    return {"role": "user", "content": text}


async def parent_chat(engine):
    """A parent chat of two turns; returns its messages (ending with the second reply)."""
    messages = [SYSTEM, user("Tell me about the quick brown fox and the lazy dog.")]
    text, _ = await turn(engine, "parent", messages)
    messages += [{"role": "assistant", "content": text}, user("And what did the dog do then?")]
    text, _ = await turn(engine, "parent", messages)
    return messages + [{"role": "assistant", "content": text}]


async def held_ids(engine, conv_id):
    return await engine._local.call(lambda: list(engine._local.session.caches.get(conv_id).token_ids))


def test_a_fork_at_a_user_message_copies_all_but_one_token_and_replies_as_a_fresh_computation(engine_with, tiny_model):
    model, tokenizer = tiny_model

    async def body(engine):
        messages = await parent_chat(engine)
        parent_before = await held_ids(engine, "parent")
        forked = messages[:4]  # ends with the user's second message, no reply
        result = await engine.fork("parent", "fork", forked, GREEDY)
        state = await cache_state(engine, "fork")
        copied = await held_ids(engine, "fork")
        _, stats = await turn(engine, "fork", forked)
        parent_after = await held_ids(engine, "parent")
        return result, state, copied, stats, parent_before, parent_after

    result, state, copied, stats, before, after = engine_with(body, idle_work=False)
    assert isinstance(result, ForkedCache) and result.copied_tokens > 0
    # Exact: the fork's prompt begins with exactly the copied ids, and its layers hold exactly them.
    assert list(stats.prompt_ids[: result.copied_tokens]) == copied
    assert state == (result.copied_tokens, result.copied_tokens)
    assert result.copied_tokens == len(stats.prompt_ids) - 1 == result.prompt_tokens
    # The fork's first reply costs only its last token, and is what a fresh computation gives.
    assert stats.reused_tokens == result.copied_tokens and stats.prefilled_tokens == 1
    assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)
    assert after == before  # the parent's cache is untouched


def test_a_fork_at_a_reply_copies_its_messages_and_its_next_turn_reads_only_the_new_one(engine_with, tiny_model):
    model, tokenizer = tiny_model

    async def body(engine):
        messages = await parent_chat(engine)
        forked = messages[:3]  # ends with the first reply
        result = await engine.fork("parent", "fork", forked, GREEDY)
        _, stats = await turn(engine, "fork", forked + [user("Something else entirely?")])
        return result, stats

    result, stats = engine_with(body, idle_work=False)
    assert result.copied_tokens == result.prompt_tokens > 0
    assert stats.reused_tokens == result.copied_tokens
    assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)


def test_a_fork_of_a_chat_without_a_cache_copies_nothing_and_still_replies(engine_with):
    async def body(engine):
        result = await engine.fork("nowhere", "fork", [SYSTEM, user("Hi")], GREEDY)
        text, stats = await turn(engine, "fork", [SYSTEM, user("Hi")])
        return result, stats

    result, stats = engine_with(body, idle_work=False)
    assert result.copied_tokens == 0 and result.reason
    assert stats.reused_tokens == 0 and stats.generated_tokens > 0


def test_a_fork_stays_within_the_memory_budget(engine_with):
    async def body(engine):
        messages = await parent_chat(engine)
        await engine.fork("parent", "fork", messages[:4], GREEDY)
        return await engine.memory_stats()

    # A budget that holds one cache: the fork's copy evicts the parent's (saved, restored later).
    report = engine_with(body, idle_work=False, kv_initial_capacity=256, memory_budget_bytes=1)
    assert report.conversations_in_memory == 1 and report.evictions >= 1
