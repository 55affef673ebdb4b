"""The window follows the engine's turn announcements (engine.turns): a turn its own API server runs
makes it busy ("Generating…"), and a message sent meanwhile is queued until that turn ends."""

import pytest

from engine.types import EngineStatus
from tests.app.gui.chat.test_queue import hold, idle, queued_note
from tests.app.gui.test_server_panel import in_thread
from tests.app_helpers import send

pytestmark = pytest.mark.qt


def test_the_window_is_busy_while_its_servers_turn_runs_and_queues_its_message_until_it_ends(qtbot, window, engine):
    import httpx

    hold(engine)  # every turn waits in its prompt reading until engine.reading is set
    engine.reply = "served"
    window.server_control.start(port=0)
    qtbot.waitUntil(lambda: window.server_control.running, timeout=10_000)
    url = f"http://127.0.0.1:{window.server_control.server.port}/v1/chat/completions"
    body = {"model": "", "messages": [{"role": "user", "content": "hi"}]}
    box = in_thread(lambda: httpx.post(url, json=body, timeout=30).json())
    qtbot.waitUntil(lambda: len(engine.calls) == 1, timeout=10_000)

    # The window asked for nothing, yet it shows the engine busy.
    assert window.chat.gen is None and not window.bridge.is_generating()
    assert window.bridge.state == EngineStatus.GENERATING
    assert window.status.state_label.text() == "Generating…"
    send(qtbot, window, "from the window", wait=False)
    assert "Queued" in queued_note(window) and len(engine.calls) == 1

    engine.reading.set()
    qtbot.waitUntil(lambda: bool(box), timeout=10_000)
    assert "error" not in box, box
    assert box["value"]["choices"][0]["message"]["content"] == "served"
    qtbot.waitUntil(lambda: idle(window) and len(engine.calls) == 2, timeout=10_000)
    assert engine.calls[1][1][-1] == {"role": "user", "content": "from the window"}
    assert window.chat_view.message_widgets()[-1].text() == "served"
    assert "Queued" not in queued_note(window)
    qtbot.waitUntil(lambda: window.status.state_label.text() == "Ready", timeout=5_000)
    window.server_control.stop()
    qtbot.waitUntil(lambda: not window.server_control.running, timeout=10_000)
