"""Shared prefixes: the index of the saved caches' ids (engine/context/prefixes.py) and what
ConversationCaches.shared copies, reads and keeps within the budget."""

import asyncio

from engine import GenerationParams
from engine.context import cache_file
from engine.context.conversation import common_prefix
from engine.context.prefixes import BLOCK, FILE_NAME, PrefixIndex
from tests.engine.test_api import turn
from tests.family_chat import LONG_SYSTEM

GREEDY = GenerationParams(temperature=0.0, max_tokens=6)


def ask(question: str) -> list:
    return [LONG_SYSTEM, {"role": "user", "content": question}]


def test_the_index_finds_the_deepest_saved_prefix_and_forgets_removed_ones():
    index = PrefixIndex()
    common = list(range(3 * BLOCK))
    index.add("short", common[: 2 * BLOCK] + [999] * BLOCK)
    index.add("long", common + [7] * BLOCK)
    index.add("other", [5] * 4 * BLOCK)
    assert index.candidates(common + [1, 2]) == [(3 * BLOCK, "long"), (2 * BLOCK, "short")]
    assert index.candidates(common, exclude={"long"}) == [(2 * BLOCK, "short")]
    assert index.candidates(common[: BLOCK - 1]) == []  # less than a block is never worth a read
    index.remove("long")
    assert index.candidates(common) == [(2 * BLOCK, "short")]


def test_a_damaged_index_file_is_ignored_and_a_saved_one_reads_back(tmp_path):
    index = PrefixIndex()
    index.add("a", list(range(2 * BLOCK)))
    index.save(tmp_path / FILE_NAME)
    again = PrefixIndex()
    again.load(tmp_path / FILE_NAME)
    assert again.candidates(list(range(2 * BLOCK))) == [(2 * BLOCK, "a")]
    for damaged in ("{", '{"version": 1, "chains": {"a": [1]}}', "[]", '{"version": 9, "chains": {}}'):
        (tmp_path / FILE_NAME).write_text(damaged)
        again.load(tmp_path / FILE_NAME)
        assert len(again) == 0


def test_a_copied_prefix_holds_only_the_shared_positions_and_stays_within_the_budget(engine_with):
    async def body(engine):
        caches = engine._local.session.caches
        _, a = await turn(engine, "a", ask("Hello there"), GREEDY)
        source = caches.get("a").nbytes
        caches.budget_bytes = int(source * 1.5)  # room for one chat and a little more
        _, b = await turn(engine, "b", ask("What now?"), GREEDY)
        return a, b, source, caches.get("b").nbytes, "a" in caches, caches.stats

    a, b, source, copied, a_in_memory, stats = engine_with(body, idle_work=False)
    assert b.reused_tokens == common_prefix(a.prompt_ids, b.prompt_ids) > 1400 and stats.shared == 1
    assert copied <= source * 1.2  # its own prefix and prompt, not a second copy of the source's buffer
    assert not a_in_memory and stats.evictions == 1  # the budget holds: the source went to disk


def test_saved_caches_are_found_through_the_index_and_only_the_best_file_is_read(tiny_model_path, monkeypatch):
    from tests.conftest import run_with_engine

    async def save_three(engine):
        _, a = await turn(engine, "a", ask("Hello there"), GREEDY)
        await turn(engine, "b", [{"role": "user", "content": "Something else " * 80}], GREEDY)
        await turn(engine, "c", [{"role": "user", "content": "And another " * 80}], GREEDY)
        return a

    a = run_with_engine(tiny_model_path, save_three)
    reads: list = []
    real_read = cache_file.read
    monkeypatch.setattr(
        cache_file, "read", lambda path, layout, conv_id: reads.append(conv_id) or real_read(path, layout, conv_id)
    )

    async def new_chats(engine):
        _, unrelated = await turn(engine, "x", [{"role": "user", "content": "Nothing shared here at all."}], GREEDY)
        read_before = list(reads)
        _, shared = await turn(engine, "d", ask("What now?"), GREEDY)
        return unrelated, read_before, shared

    unrelated, read_before, shared = run_with_engine(tiny_model_path, new_chats)
    assert unrelated.reused_tokens == 0 and read_before == []  # no file opened for a prompt nothing shares
    assert reads == ["a"] and shared.reused_tokens == common_prefix(a.prompt_ids, shared.prompt_ids) > 1400


def test_an_index_entry_whose_file_is_gone_costs_a_prefill_and_nothing_else(tiny_model_path, chinwag_home):
    from tests.conftest import run_with_engine

    async def first(engine):
        await turn(engine, "a", ask("Hello there"), GREEDY)

    run_with_engine(tiny_model_path, first)
    (index,) = (chinwag_home / "kv").rglob(FILE_NAME)
    assert '"a"' in index.read_text()
    for f in (chinwag_home / "kv").rglob("*.safetensors"):
        f.unlink()  # pruned under another model's budget, or deleted by the user

    async def second(engine):
        entries = len(engine._local.session.caches.prefixes)
        return entries, (await turn(engine, "b", ask("What now?"), GREEDY))[1]

    entries, b = run_with_engine(tiny_model_path, second)
    assert entries == 0 and b.reused_tokens == 0 and b.generated_tokens > 0


def test_a_forgotten_chat_leaves_the_saved_index_at_once(engine_with, chinwag_home):
    async def body(engine):
        caches = engine._local.session.caches
        await turn(engine, "a", ask("Hello there"), GREEDY)
        await turn(engine, "b", ask("What now?"), GREEDY)
        await asyncio.to_thread(caches.save_all)
        (index,) = (chinwag_home / "kv").rglob(FILE_NAME)
        before = index.read_text()
        await engine.forget("a")
        await asyncio.to_thread(caches.writer.flush)
        return before, index.read_text()

    before, after = engine_with(body, idle_work=False)
    assert '"a"' in before and '"b"' in before
    assert '"a"' not in after and '"b"' in after  # a deleted chat's ids leave no trace, not even hashed


def test_an_index_larger_than_any_real_one_is_not_read(tmp_path, monkeypatch, caplog):
    from engine.context import prefixes

    path = tmp_path / FILE_NAME
    index = PrefixIndex()
    index.add("a", list(range(64)))
    index.save(path)
    monkeypatch.setattr(prefixes, "MAX_BYTES", path.stat().st_size - 1)
    loaded = PrefixIndex()
    loaded.load(path)
    assert len(loaded) == 0 and "over" in caplog.text
