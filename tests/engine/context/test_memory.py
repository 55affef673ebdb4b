"""Caches survive a restart: saved on close within a disk budget, keyed by the model's weights."""

import asyncio
import os
import shutil

import pytest

from engine import GenerationParams
from engine.context.memory import weights_identity
from tests.conftest import run_with_engine
from tests.engine.test_api import turn

GREEDY = GenerationParams(temperature=0.0, max_tokens=8)
FIRST = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story about a cat"}]


session = run_with_engine


def first_then_follow_up(model_path, second_path=None):
    """A turn, close, reopen (on `second_path` if given), a follow-up: its stats and the first's."""

    async def first(engine):
        text, stats = await turn(engine, "chat", FIRST, GREEDY)
        return text, stats

    text, stats = session(model_path, first)
    follow = FIRST + [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]

    async def second(engine):
        return (await turn(engine, "chat", follow, GREEDY))[1]

    return stats, session(second_path or model_path, second)


def test_the_first_follow_up_after_a_restart_prefills_only_its_new_tokens(tiny_model_path, chinwag_home):
    first, again = first_then_follow_up(tiny_model_path)
    held = len(first.prompt_ids) + len(first.reply_ids)
    assert again.reused_tokens == held and again.prefilled_tokens == len(again.prompt_ids) - held
    assert not list((chinwag_home / "kv").rglob("*.part.safetensors"))


def test_other_weights_at_the_same_path_never_restore_a_cache(tiny_model_path, tmp_path):
    from tests.tiny_model import build_tiny_model

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_path, folder)
    before = weights_identity(folder)

    async def first(engine):
        return await turn(engine, "chat", FIRST, GREEDY)

    text, stats = session(folder, first)
    build_tiny_model(folder, seed=1)  # the folder is updated in place: new weights, same path
    assert weights_identity(folder) != before
    follow = FIRST + [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]

    async def second(engine):
        return (await turn(engine, "chat", follow, GREEDY))[1]

    again = session(folder, second)
    assert again.reused_tokens == 0


def test_close_saves_the_most_recent_caches_within_the_disk_budget(tiny_model_path, chinwag_home):
    from engine.context.memory import _file_bytes

    async def body(engine):
        for conv in ("old", "middle", "recent"):
            await turn(engine, conv, [{"role": "user", "content": f"Hello from the {conv} chat"}], GREEDY)
        caches = engine._local.session.caches
        # Room for about two caches: the least recently used one is not saved.
        caches.disk_budget_bytes = int(2.5 * max(_file_bytes(c) for c in caches._caches.values()))
        return caches

    caches = session(tiny_model_path, body)
    saved = {p.stem for p in (chinwag_home / "kv").rglob("*.safetensors")}
    assert saved == {caches._path(c).stem for c in ("middle", "recent")}


def test_the_disk_budget_deletes_the_least_recently_written_files_first(tmp_path):
    from engine.context.memory import ConversationCaches

    caches = ConversationCaches(1 << 30, tmp_path, disk_budget_bytes=250)
    for i, name in enumerate(("a", "b", "c")):
        f = tmp_path / "somemodel" / f"{name}.safetensors"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(b"x" * 100)
        os.utime(f, ns=(i * 10**9, i * 10**9))
    caches.prune_disk()
    assert sorted(p.stem for p in tmp_path.rglob("*.safetensors")) == ["b", "c"]


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_saved_cache_costs_a_re_prefill_not_a_failed_turn(tiny_model_path, chinwag_home, damage):
    async def first(engine):
        return await turn(engine, "chat", FIRST, GREEDY)

    text, _ = session(tiny_model_path, first)
    (path,) = list((chinwag_home / "kv").rglob("*.safetensors"))
    path.write_bytes(path.read_bytes()[:100] if damage == "truncate" else b"not a safetensors file")
    follow = FIRST + [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]

    async def second(engine):
        return (await turn(engine, "chat", follow, GREEDY))[1]

    again = session(tiny_model_path, second)
    assert again.reused_tokens == 0 and again.finish_reason in ("length", "stop")


def test_saving_on_close_stops_at_its_time_limit_most_recent_first(tiny_model_path, chinwag_home):
    async def body(engine):
        for conv in ("old", "recent"):
            await turn(engine, conv, [{"role": "user", "content": f"Hello from the {conv} chat"}], GREEDY)
        return engine._local.session.caches

    caches = None

    async def run(engine):
        nonlocal caches
        caches = await body(engine)
        (chinwag_home / "kv" / "x").mkdir(parents=True, exist_ok=True)
        (chinwag_home / "kv" / "x" / ".cut.0123abcd.part.safetensors").write_bytes(b"half")
        return await asyncio.wrap_future(engine._local.thread.submit(lambda: caches.save_all(seconds=0.0)))

    assert session(tiny_model_path, run) == 1  # the first (most recent) is always saved
    assert not list((chinwag_home / "kv").rglob("*.part.safetensors"))


@pytest.mark.parametrize("seconds, saved", [(0.0, 1), (60.0, 2)])
def test_the_engine_passes_its_save_time_to_close(tiny_model_path, chinwag_home, seconds, saved):
    # `chinwag serve` gives a long time (nobody waits on a window): every cache in memory is saved.
    async def body(engine):
        for conv in ("old", "recent"):
            await turn(engine, conv, [{"role": "user", "content": f"Hello from the {conv} chat"}], GREEDY)

    run_with_engine(tiny_model_path, body, save_seconds=seconds)
    assert len(list((chinwag_home / "kv").rglob("*.safetensors"))) == saved


# --- evictions are written on the writer's thread -----------------------------------------


@pytest.fixture
def evicting(tiny_model, tiny_model_path, tmp_path):
    """ConversationCaches on the tiny model with a budget of one byte: every other chat is evicted.
    Returns (caches, a cache of 20 tokens to evict)."""
    from engine.context.cache_file import layout_of
    from engine.context.conversation import ConversationCache
    from engine.context.memory import ConversationCaches
    from engine.local.generation import prefill

    model, _ = tiny_model
    caches = ConversationCaches(budget_bytes=1, save_dir=tmp_path / "kv")
    caches.set_model(str(tiny_model_path), layout_of(model, 512))
    conv = ConversationCache.create(model, 16)
    prefill(model, conv, list(range(1, 21)))
    return caches, conv


def same_cache(a, b) -> bool:
    import mlx.core as mx

    return a.token_ids == b.token_ids and all(
        mx.array_equal(x.state[0], y.state[0]).item() and mx.array_equal(x.state[1], y.state[1]).item()
        for x, y in zip(a.layers, b.layers)
    )


def saved_files(caches):
    return [p for p in caches.save_dir.rglob("*.safetensors") if p.is_file()]


def test_an_eviction_returns_before_its_file_is_written_and_the_file_restores_it(evicting):
    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("old", conv)
    release = held(caches.writer)
    assert caches.enforce(keep="new") == ["old"]  # returns although the writer is held
    assert saved_files(caches) == []
    release.set()
    caches.writer.flush()
    assert len(saved_files(caches)) == 1
    caches._settle()  # the snapshot is let go once written: the file restores the cache
    assert not caches._writing
    assert same_cache(caches.get("old"), conv) and caches.report().restores == 1


def test_a_chat_that_returns_before_its_file_is_written_gets_its_cache_and_no_file_is_left(evicting):
    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("old", conv)
    release = held(caches.writer)
    caches.enforce(keep="new")
    back = caches.get("old")
    release.set()
    caches.writer.flush()
    assert same_cache(back, conv)
    assert saved_files(caches) == []  # cancelled before it started


def test_a_chat_deleted_before_its_file_is_written_is_never_written(evicting):
    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("secret", conv)
    release = held(caches.writer)
    caches.enforce(keep="new")
    caches.forget("secret")
    release.set()
    caches.writer.flush()
    assert saved_files(caches) == []


def test_a_chat_deleted_after_it_came_back_leaves_no_entry_in_the_saved_index(evicting):
    """Evicted (its file and a copy of the index queued), back before they were written, then
    deleted: the queued copy wrote its id into prefixes.json after the deletion."""
    from engine.context.prefixes import FILE_NAME
    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("secret", conv)
    release = held(caches.writer)
    caches.enforce(keep="new")
    assert caches.get("secret") is conv
    caches.forget("secret")
    release.set()
    caches.writer.flush()
    (index,) = caches.save_dir.rglob(FILE_NAME)
    assert '"secret"' not in index.read_text()


def test_saving_on_close_waits_for_the_evictions_being_written(evicting):
    import threading

    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("old", conv)
    release = held(caches.writer)
    caches.enforce(keep="new")
    threading.Timer(0.2, release.set).start()
    caches.save_all()
    assert len(saved_files(caches)) == 1


def test_a_newer_cache_put_while_the_older_is_written_leaves_no_older_file(evicting):
    from tests.engine.context.test_cache_writer import held

    caches, conv = evicting
    caches.put("chat", conv)
    release = held(caches.writer)
    caches.enforce(keep="new")
    caches.put("chat", conv)  # e.g. the chat prepared again in the background
    release.set()
    caches.writer.flush()
    assert saved_files(caches) == [] and caches.report().restores == 0


def test_an_evicted_cache_is_let_go_once_its_file_is_written(evicting, tiny_model):
    import gc
    import weakref

    from engine.context.conversation import ConversationCache
    from engine.local.generation import prefill

    caches, _ = evicting
    conv = ConversationCache.create(tiny_model[0], 16)
    prefill(tiny_model[0], conv, list(range(1, 21)))
    gone = weakref.ref(conv)
    caches.put("old", conv)
    del conv
    caches.enforce(keep="new")
    caches.writer.flush()
    caches.enforce(keep="new")  # any later call lets the written snapshots go
    gc.collect()
    assert gone() is None and len(saved_files(caches)) == 1


def test_a_full_disk_while_an_eviction_is_written_costs_a_re_read(evicting, monkeypatch, caplog):
    import logging

    from engine.context import cache_file

    def no_space(self, path):
        raise OSError(28, "No space left on device")

    caches, conv = evicting
    monkeypatch.setattr(cache_file.Snapshot, "write", no_space)
    caches.put("old", conv)
    with caplog.at_level(logging.WARNING):
        caches.enforce(keep="new")
        caches.writer.flush()
        assert caches.get("old") is None  # a new chat to the turn: it reads the history again
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "No space left on device" in caplog.records[0].getMessage()
    assert saved_files(caches) == []  # no part file left


def test_evictions_not_yet_written_hold_no_more_than_the_budget(evicting, tiny_model):
    """A slow disk: the next eviction waits for the oldest write rather than pile caches up in memory."""
    import threading

    from engine.context.conversation import ConversationCache
    from engine.local.generation import prefill
    from tests.engine.context.test_cache_writer import held

    caches, first = evicting
    second = ConversationCache.create(tiny_model[0], 16)
    prefill(tiny_model[0], second, list(range(1, 21)))
    release = held(caches.writer)
    caches.put("first", first)
    caches.enforce(keep="new")  # one write in flight, whatever its size
    assert saved_files(caches) == []
    caches.put("second", second)
    threading.Timer(0.2, release.set).start()
    caches.enforce(keep="new")  # two would hold more than the budget: the first is written first
    assert len(saved_files(caches)) >= 1 and "first" not in caches._writing
    caches.writer.flush()


def test_a_saved_cache_is_a_safetensors_file_the_reference_reader_opens(evicting, tmp_path):
    """The file is written by hand from the cache's buffers (mx.save_safetensors evaluates, which
    only the engine thread may): the safetensors library itself reads the same tensors back."""
    import numpy as np
    from safetensors import safe_open

    from engine.context import cache_file

    _, conv = evicting
    path = tmp_path / "c.safetensors"
    cache_file.snapshot("c", conv).write(path)
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata()["conversation"] == "c" and f.metadata()["layers"] == str(len(conv.layers))
        assert f.get_tensor("token_ids").tolist() == conv.token_ids
        for i, layer in enumerate(conv.layers):
            keys, values = layer.state
            assert np.array_equal(f.get_tensor(f"{i}.keys"), np.array(keys))
            assert np.array_equal(f.get_tensor(f"{i}.values"), np.array(values))
