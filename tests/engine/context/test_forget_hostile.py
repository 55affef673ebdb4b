"""Deleting a chat erases what kv/ holds of it, whichever model was loaded when it was saved, and
nothing odd in kv/ (a folder where a file goes, a damaged prefix index) makes a restore, a forget, a
model switch or a close raise (issue 35 item 11: issue 11 item 3 and issue 15, re-tried)."""

import asyncio
import logging
import shutil

import pytest

from engine import Engine, GenerationParams
from engine.context.prefixes import FILE_NAME
from engine.paths import kv_file_name
from tests.conftest import run_with_engine
from tests.engine.test_api import turn

GREEDY = GenerationParams(temperature=0.0, max_tokens=6)
LONG = [{"role": "user", "content": "The secret word is pineapple, said twice and more. " * 6}]
OTHER = [{"role": "user", "content": "Hello there, how is the weather today? " * 6}]


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("other-model"), seed=1)


def traces(kv, conv_id: str) -> list[str]:
    """Whatever kv/ holds of a conversation: its files (saved, or a save cut off) and index entries."""
    digest = kv_file_name(conv_id).removesuffix(".safetensors")
    files = [p.name for p in kv.rglob("*") if digest in p.name]
    indexes = [p.parent.name for p in kv.rglob(FILE_NAME) if p.is_file() and f'"{conv_id}"' in p.read_text()]
    return files + indexes


def index_of(kv, model_key: str) -> str:
    return (kv / model_key / FILE_NAME).read_text()


def saved_then_switched(model_path, other_model):
    """ "secret" and "kept" chatted on `model_path`, then the switch to `other_model`; the first model's key."""

    async def body(engine):
        await turn(engine, "secret", LONG, GREEDY)
        await turn(engine, "kept", OTHER, GREEDY)
        key = engine._local.session.caches.model_key
        await engine.load_model(str(other_model))
        await turn(engine, "kept", OTHER, GREEDY)
        return key

    return run_with_engine(model_path, body)


@pytest.mark.parametrize("when", ["after the switch", "before the engine starts"])
def test_a_chat_deleted_after_a_model_switch_leaves_nothing_in_kv(tiny_model_path, other_model, chinwag_home, when):
    """The first model's prefix index kept the deleted chat's id and its ids' hashes."""
    kv = chinwag_home / "kv"
    first = saved_then_switched(tiny_model_path, other_model)
    assert traces(kv, "secret") and '"kept"' in index_of(kv, first)

    async def forget():
        engine = Engine()
        try:
            if when == "after the switch":
                await engine.load_model(str(other_model))
            await engine.forget("secret")
        finally:
            await engine.close()

    asyncio.run(forget())
    assert traces(kv, "secret") == []
    assert '"kept"' in index_of(kv, first)  # another chat's entry stays


def test_a_save_cut_off_leaves_no_copy_a_deletion_misses(tiny_model_path, chinwag_home):
    """A crash mid-save leaves the temp file (the whole cache, under another name): deleting the chat
    left it in kv/."""
    kv = chinwag_home / "kv"
    run_with_engine(tiny_model_path, lambda engine: turn(engine, "secret", LONG, GREEDY))
    (saved,) = kv.rglob(kv_file_name("secret"))
    shutil.copy(saved, saved.parent / f".{saved.name[:40]}.0badcafe.part.safetensors")

    async def forget():
        engine = Engine()
        await engine.forget("secret")
        await engine.close()

    asyncio.run(forget())
    assert traces(kv, "secret") == []


def folder_at_cache_path(kv, conv_id: str):
    (folder,) = [p for p in kv.iterdir() if p.is_dir()]
    (folder / kv_file_name(conv_id)).mkdir()
    (folder / kv_file_name(conv_id) / "inside").write_text("not ours")


@pytest.mark.parametrize("started", [True, False], ids=["engine started", "engine not started"])
def test_a_folder_at_a_cache_path_breaks_no_restore_forget_or_close(tiny_model_path, chinwag_home, caplog, started):
    """forget raised IsADirectoryError (a bug, the chat's deletion failed); a restore logged a bug."""
    kv = chinwag_home / "kv"
    run_with_engine(tiny_model_path, lambda engine: turn(engine, "kept", OTHER, GREEDY))
    folder_at_cache_path(kv, "secret")

    async def body(engine):
        reply, stats = await turn(engine, "secret", LONG, GREEDY)  # a restore finds the folder
        await engine.forget("secret")
        return stats

    async def not_started():
        engine = Engine()
        try:
            await engine.forget("secret")
        finally:
            await engine.close()

    with caplog.at_level(logging.WARNING):
        if started:
            stats = run_with_engine(tiny_model_path, body)
            assert stats.error == "" and stats.reused_tokens == 0
        else:
            asyncio.run(not_started())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize(
    "index",
    [
        '{"version": 1, "chains": {"\\ud800": ["0123456789abcdef"]}}',  # an id no file name can hold
        '{"version": 1, "chains": {"x": ["0123456789abcdef"], "y": "0123456789abcdef"}}',
        '{"version": 1, "chains": []}',
        "[" * 100_000,
    ],
    ids=["lone surrogate id", "a chain not a list", "chains not an object", "nested past the parser"],
)
def test_a_damaged_prefix_index_breaks_no_load_switch_or_forget(
    tiny_model_path, other_model, chinwag_home, caplog, index
):
    """An id with a lone surrogate made every load of the model raise (a bug, after the weights
    were swapped in)."""
    kv = chinwag_home / "kv"
    first = saved_then_switched(tiny_model_path, other_model)
    (kv / first / FILE_NAME).write_text(index)

    async def body(engine):
        await turn(engine, "new", OTHER, GREEDY)
        await engine.load_model(str(tiny_model_path))
        _, stats = await turn(engine, "kept", OTHER, GREEDY)
        await engine.forget("kept")
        return stats

    with caplog.at_level(logging.WARNING):
        stats = run_with_engine(other_model, body)
    assert stats.error == "" and stats.reused_tokens > 0  # "kept"'s own saved cache, restored
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert traces(kv, "kept") == []


def test_a_switch_that_fails_after_the_weights_load_leaves_no_model_on_another_models_caches(
    tiny_model_path, other_model, monkeypatch
):
    """The new weights were made current before the cache layout was probed: a probe that failed
    left them running on the old model's caches."""
    from engine.local import session as session_module

    probe = session_module.layout_of

    async def body(engine):
        await turn(engine, "c", LONG, GREEDY)
        session = engine._local.session
        old = session.model

        def failing(model, *args):
            if model is not old:
                raise RuntimeError("the probe failed")
            return probe(model, *args)

        monkeypatch.setattr(session_module, "layout_of", failing)
        with pytest.raises(Exception, match="the probe failed"):
            await engine.load_model(str(other_model))
        held = (await engine.memory_stats()).conversations_in_memory
        return session.model is old, held

    kept_old, held = run_with_engine(tiny_model_path, body)
    assert kept_old and held == 1  # the old model, with its own cache


def test_a_draft_read_ahead_before_a_switch_leaves_no_copy_once_its_chat_is_sent(
    tiny_model_path, other_model, chinwag_home
):
    """A draft read ahead on one model (a document's text), then a switch, then the message sent:
    adopt found no cache under the new model and left the draft's file under the old one, where
    deleting the chat never reached it."""
    kv = chinwag_home / "kv"
    draft = [{"role": "system", "content": "Be brief."}, *LONG]

    async def body(engine):
        await engine.prefill("draft", draft, GREEDY)
        assert (await engine.wait_background()).finished
        await engine.load_model(str(other_model))  # the draft's cache is saved under the first model
        assert traces(kv, "draft")
        adopted = await engine.adopt("draft", "chat")
        await turn(engine, "chat", draft, GREEDY)
        await engine.forget("chat")  # the chat is deleted
        return adopted

    assert run_with_engine(tiny_model_path, body) is False
    assert traces(kv, "draft") == [] and traces(kv, "chat") == []


def test_a_kv_folder_that_is_a_dangling_symlink_is_named_as_one_and_breaks_no_forget(
    tiny_model_path, chinwag_home, tmp_path
):
    """It was called "a file, not a folder"; and once the engine had failed to start on it, deleting
    a chat raised that error again."""
    from engine import ChinwagError

    (chinwag_home / "kv").symlink_to(tmp_path / "gone")

    async def body():
        engine = Engine()
        try:
            with pytest.raises(ChinwagError, match=r"KV cache folder .*kv: it is a symlink to .*gone, which does not"):
                await engine.load_model(str(tiny_model_path))
            await engine.forget("secret")  # must not raise
        finally:
            await engine.close()

    asyncio.run(body())


def test_a_symlink_at_the_prefix_index_is_replaced_never_written_through(tiny_model_path, chinwag_home, tmp_path):
    """Cache files were guarded; prefixes.json was written through a link onto whatever it named."""
    kv = chinwag_home / "kv"
    run_with_engine(tiny_model_path, lambda engine: turn(engine, "a", LONG, GREEDY))
    (index,) = kv.rglob(FILE_NAME)
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's own file")
    index.unlink()
    index.symlink_to(victim)
    run_with_engine(tiny_model_path, lambda engine: turn(engine, "b", OTHER, GREEDY))
    assert victim.read_text() == "the user's own file"
    assert index.is_file() and not index.is_symlink() and '"b"' in index.read_text()


def test_a_named_pipe_at_the_prefix_index_blocks_no_load(tiny_model_path, chinwag_home):
    """The index was read with read_text: a named pipe there held the model's load forever."""
    import os
    import threading

    kv = chinwag_home / "kv"
    run_with_engine(tiny_model_path, lambda engine: turn(engine, "a", LONG, GREEDY))
    (index,) = kv.rglob(FILE_NAME)
    index.unlink()
    os.mkfifo(index)
    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(run_with_engine(tiny_model_path, lambda e: turn(e, "a", LONG, GREEDY))),
        daemon=True,
    )
    worker.start()
    worker.join(120)
    if worker.is_alive():
        with open(index, "w"):  # let the engine thread go, so the run can end
            pass
        pytest.fail("a named pipe at the prefix index blocked the load")
    assert result[0][1].error == ""
