"""File › Server… on the real engine and the tiny model: the window's own engine serves the openai client."""

import threading

import pytest

from tests.app_helpers import dispose

pytestmark = pytest.mark.qt


def in_thread(fn):
    """Run a blocking client call off the Qt thread (the server runs on the Qt loop); returns a result box."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - everything the thread raised is re-raised in the test
            box["error"] = e

    threading.Thread(target=run, daemon=True).start()
    return box


def test_the_window_serves_its_engine(qtbot, qloop, tiny_model_path, monkeypatch):
    import httpx
    import openai

    from app.core.store import Store
    from app.gui.server_panel import open_api_server_dialog
    from app.gui.window import MainWindow
    from engine.api import Engine

    monkeypatch.setenv("CHINWAG_KEYRING", "0")  # the key goes to the test's data folder, not a real keychain
    store = Store()
    window = MainWindow(store, Engine())
    window.show()
    task = window.start_engine(str(tiny_model_path))
    qtbot.waitUntil(task.done, timeout=120_000)
    assert window.server_action.text() == "Server…"
    dialog = open_api_server_dialog(window)
    dialog.port_box.setValue(_free_port())
    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: window.server_control.running, timeout=10_000)
    url = dialog.url_label.text()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert dialog.toggle_button.text() == "Stop Server" and "none" in dialog.key_label.text()

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "Hello"}]
    box = in_thread(lambda: client.chat.completions.create(model="", messages=messages, max_tokens=3, temperature=0))
    qtbot.waitUntil(lambda: bool(box), timeout=60_000)
    assert "error" not in box, box
    assert box["value"].usage.completion_tokens == 3
    qtbot.waitUntil(lambda: dialog.table.rowCount() == 1, timeout=5_000)
    assert dialog.table.item(0, 2).text() == str(box["value"].usage.prompt_tokens)

    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: dialog.url_label.text() == "not running", timeout=20_000)
    assert not window.server_control.running

    # Other machines: a key is generated, stored like the servers' keys, shown, and required.
    dialog.others_box.setChecked(True)
    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: window.server_control.running or bool(dialog.status_label.text()), timeout=10_000)
    assert window.server_control.running, dialog.status_label.text()
    from app.gui.server_panel import KEY_NAME
    from engine.remote import servers

    key = servers.api_key(KEY_NAME)
    assert len(key) >= 24 and dialog.key_label.text() == key
    local = f"http://127.0.0.1:{window.server_control.server.port}/v1"
    box = in_thread(
        lambda: [httpx.get(local + "/models", headers=h).status_code for h in ({}, {"Authorization": f"Bearer {key}"})]
    )
    qtbot.waitUntil(lambda: bool(box), timeout=30_000)
    assert box.get("value") == [401, 200], box
    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: dialog.url_label.text() == "not running", timeout=20_000)
    dialog.close()
    dispose(qtbot, window, store)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
