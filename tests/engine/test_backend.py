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
