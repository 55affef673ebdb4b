"""app/gui/engine_bridge.py: the bridge's state is an EngineStatus, the engine's once it has started."""

import pytest

from engine.errors import ChinwagError
from engine.types import EngineStatus, TurnOrigin
from tests.app_helpers import FakeEngine

pytestmark = pytest.mark.qt


class UnstartableEngine(FakeEngine):
    async def start(self):
        raise ChinwagError("MLX could not start here")


def test_the_state_goes_starting_idle_loading_ready_generating_ready(qtbot, qloop):
    from app.gui.engine_bridge import EngineBridge

    engine = FakeEngine(token_delay=0.01)
    bridge = EngineBridge(engine)
    seen = []
    bridge.stateChanged.connect(seen.append)
    assert bridge.state == EngineStatus.STARTING
    bridge.start()
    qtbot.waitUntil(lambda: bridge.state == EngineStatus.IDLE, timeout=5000)
    bridge.load_model(engine.models[0].id)
    qtbot.waitUntil(lambda: bridge.state == EngineStatus.READY, timeout=5000)
    assert engine.state.state == EngineStatus.READY  # the bridge's state is the engine's

    async def reply():  # as the turn driver runs a window reply (app/gui/chat/reply.py)
        async for _ in engine.chat("c", [{"role": "user", "content": "hi"}], None, origin=TurnOrigin.WINDOW):
            pass

    bridge.run_turn("c", reply())
    assert bridge.state == EngineStatus.GENERATING  # asked for: before the engine's task has begun
    qtbot.waitUntil(lambda: not bridge.is_generating() and bridge.state == EngineStatus.READY, timeout=10_000)
    assert seen == ["idle", "loading", "ready", "generating", "ready"]
    assert all(isinstance(s, str) for s in seen)


def test_an_engine_that_cannot_start_is_an_error_state(qtbot, qloop):
    from app.gui.engine_bridge import EngineBridge

    bridge = EngineBridge(UnstartableEngine())
    failures, seen = [], []
    bridge.startFailed.connect(failures.append)
    bridge.stateChanged.connect(seen.append)
    bridge.start()
    qtbot.waitUntil(lambda: bridge.state == EngineStatus.ERROR, timeout=5000)
    assert failures == ["MLX could not start here"] and seen == ["error"]
    assert bridge.prefill("c", [{"role": "user", "content": "hi"}], None) is None
