"""engine/backend.py: the stop signal every turn gets, and Engine's delegation to its one backend."""

import asyncio
import concurrent.futures

from engine.api import Engine
from engine.backend import StopSignal
from engine.local.backend import LocalBackend


def test_a_stop_cancels_the_watched_request_before_or_after_it_is_watched():
    early, late = StopSignal(), StopSignal()
    early.set()
    first, second = concurrent.futures.Future(), concurrent.futures.Future()
    early.watch(first)
    late.watch(second)
    assert first.cancelled() and not second.cancelled() and not late.is_set()
    late.set()
    assert second.cancelled() and late.is_set()


def test_a_stop_without_a_request_only_flags_the_turn():
    stop = StopSignal()
    stop.set()
    assert stop.is_set()


def test_a_new_engine_delegates_to_its_local_backend_without_starting_it(chinwag_home):
    async def main():
        engine = Engine()
        assert engine._backend is engine._local and isinstance(engine._local, LocalBackend)
        adopted = await engine.adopt("draft", "chat")
        refused = await engine.prefill("chat", [{"role": "user", "content": "hi"}])
        await engine.close()
        return adopted, refused, engine._local.thread

    adopted, refused, thread = asyncio.run(main())
    assert adopted is False and thread is None  # nothing read ahead, and no MLX thread started for it
    assert not refused.finished and refused.reason == "the engine is busy or has no model"


def test_the_engine_says_starting_while_its_thread_starts_and_error_if_it_cannot(chinwag_home, monkeypatch):
    import threading

    from engine.errors import ChinwagError
    from engine.types import EngineStatus

    release = threading.Event()
    real = LocalBackend._create_session

    def slow_start(self):
        release.wait(30)
        real(self)

    async def main():
        engine = Engine()
        before = engine.state.state
        monkeypatch.setattr(LocalBackend, "_create_session", slow_start)
        starting = asyncio.ensure_future(engine.start())
        await asyncio.sleep(0)
        during = engine.state.state
        release.set()
        await starting
        after = engine.state.state
        await engine.close()

        def broken(self):
            raise ChinwagError("MLX could not start")

        monkeypatch.setattr(LocalBackend, "_create_session", broken)
        failing = Engine()
        try:
            await failing.start()
        except ChinwagError:
            pass
        failed = failing.state.state
        await failing.close()
        return before, during, after, failed

    before, during, after, failed = asyncio.run(main())
    assert (before, during, after) == (EngineStatus.IDLE, EngineStatus.STARTING, EngineStatus.IDLE)
    assert failed == EngineStatus.ERROR
