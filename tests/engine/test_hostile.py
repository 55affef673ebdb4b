"""Privacy of the KV caches on disk, and bugs in the engine: logged with their traceback,
shown to the user as one line that says so (never as the user's fault)."""

import asyncio
import shutil
import stat

import pytest

from engine import Engine, GenerationParams, TurnStats
from tests.app.gui.test_bad_input import make_window, send
from tests.app_helpers import FakeEngine, run
from tests.engine.test_api import evictions_written

GREEDY = GenerationParams(temperature=0.0, max_tokens=4)


async def _turn(engine, conv, text):
    async for ev in engine.chat(conv, [{"role": "user", "content": text}], GREEDY):
        if isinstance(ev, TurnStats):  # chat also yields PrefillProgress before the text
            return ev


def test_deleting_a_chat_deletes_its_kv_files_under_every_model(tiny_model_path, tmp_path, chinwag_home):
    other_model = shutil.copytree(tiny_model_path, tmp_path / "another-model")

    async def main():
        engine = Engine(memory_budget_bytes=1)  # every other chat is evicted to disk
        try:
            await engine.load_model(str(tiny_model_path))
            await _turn(engine, "secret", "my secret plans")
            await _turn(engine, "other", "something else")  # evicts "secret" under this model
            await evictions_written(engine)
            saved = list((chinwag_home / "kv").rglob("*.safetensors"))
            assert saved, "nothing was evicted"
            for f in saved:
                assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
            assert stat.S_IMODE((chinwag_home / "kv").stat().st_mode) == 0o700
            await engine.load_model(str(other_model))  # a model switch: another kv/ folder
            await engine.forget("secret")
            return list((chinwag_home / "kv").rglob("*.safetensors"))
        finally:
            await engine.close()

    left = asyncio.run(main())
    import hashlib

    secret = hashlib.sha1(b"secret").hexdigest()
    assert not [f for f in left if f.name.startswith(secret)], left


def test_a_bug_during_a_reply_is_logged_not_blamed_on_the_user(tiny_model_path, chinwag_home, monkeypatch):
    from engine.local import generation

    def broken_prefill(*args, **kwargs):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setattr(generation, "prefill", broken_prefill)

    async def main():
        engine = Engine()
        try:
            await engine.load_model(str(tiny_model_path))
            return await _turn(engine, "c", "hello")
        finally:
            await engine.close()

    stats = asyncio.run(main())
    assert stats.finish_reason == "error"
    assert "a bug in Chinwag" in stats.error and str(chinwag_home / "chinwag.log") in stats.error
    log = (chinwag_home / "chinwag.log").read_text()
    assert "Traceback" in log and "broken_prefill" in log


@pytest.mark.qt
def test_the_window_shows_a_bug_as_a_banner_with_the_log_path(qtbot, qloop, store, chinwag_home):
    class Buggy(FakeEngine):
        async def _chat(self, conv_id, messages, params, stop):
            raise KeyError("role")
            yield  # an async generator

    w = make_window(qtbot, store, Buggy())
    send(qtbot, w, "hello")
    banner = w.notices.bar("error").text()
    assert "a bug in Chinwag" in banner and str(chinwag_home / "chinwag.log") in banner
    assert "KeyError" in (chinwag_home / "chinwag.log").read_text()
    assert store.get_conversation(w.chat.conv_id).messages[-1].status == "failed"
    w.close()
    run(qtbot, w.shutdown())


def test_download_failures_from_the_hub_are_user_errors_and_bugs_stay_bugs():
    from huggingface_hub.errors import EntryNotFoundError

    from engine.errors import ChinwagError
    from engine.models.download import _user_error

    bug = TypeError("'NoneType' object is not iterable")
    assert _user_error(bug, "a/b") is bug
    hub = _user_error(EntryNotFoundError("404 no such file"), "a/b")
    assert isinstance(hub, ChinwagError) and "a/b" in str(hub)
    disk = _user_error(OSError(28, "No space left on device"), "a/b")
    assert isinstance(disk, ChinwagError) and "No space left" in str(disk)


def test_a_bug_on_the_engine_thread_is_logged_there_once(chinwag_home):
    from engine.local.thread import EngineThread

    def broken_job():
        return {}["missing"]

    thread = EngineThread()
    try:
        future = thread.submit(broken_job)
        with pytest.raises(KeyError):
            future.result(timeout=30)
        from engine.log import report_bug

        line = report_bug(future.exception(), "the caller")  # the caller reports it too: not logged twice
    finally:
        thread.shutdown()
    log = (chinwag_home / "chinwag.log").read_text()
    assert log.count("Traceback") == 1 and "broken_job" in log and "the engine thread (broken_job)" in log
    assert "a bug in Chinwag stopped the caller" in line


def test_a_chat_deleted_before_the_engine_starts_loses_its_saved_caches(chinwag_home):
    from engine.paths import kv_file_name

    saved = [chinwag_home / "kv" / model / kv_file_name("old-chat") for model in ("model-a", "model-b")]
    for f in saved:
        f.parent.mkdir(parents=True)
        f.write_bytes(b"saved by an earlier run")
    other = chinwag_home / "kv" / "model-a" / kv_file_name("another-chat")
    other.write_bytes(b"keep")

    async def main():
        engine = Engine()  # never started: no thread, no MLX
        await engine.forget("old-chat")
        assert engine._local.thread is None
        await engine.close()

    asyncio.run(main())
    assert not any(f.exists() for f in saved) and other.exists()
