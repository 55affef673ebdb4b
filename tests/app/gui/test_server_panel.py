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


def test_a_request_while_the_window_replies_waits_says_so_and_leaves_the_chat_intact(qtbot, qloop, tiny_model_path):
    import openai
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.core.settings import DEFAULTS_KEY
    from app.core.store import Store
    from app.gui.server_panel import open_api_server_dialog
    from app.gui.window import MainWindow
    from engine.api import Engine

    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": 2000, "temperature": 0.0})  # long enough to be interrupted
    window = MainWindow(store, Engine())
    window.show()
    task = window.start_engine(str(tiny_model_path))
    qtbot.waitUntil(task.done, timeout=120_000)
    dialog = open_api_server_dialog(window)
    # Beside the window, not modal: the user chats while it lists requests; opened again, it is the same one.
    assert dialog.windowModality() == Qt.WindowModality.NonModal and open_api_server_dialog(window) is dialog
    dialog.port_box.setValue(_free_port())
    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: window.server_control.running, timeout=10_000)
    client = openai.OpenAI(base_url=dialog.url_label.text(), api_key="none", max_retries=0, timeout=120)
    said: list = []
    window.server_control.waiting.connect(said.append)

    window.composer.set_text("Tell me a story about a cat and a long journey.")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is not None and len(window.chat.gen.text) > 0, timeout=60_000)
    messages = [{"role": "user", "content": "Hello"}]
    box = in_thread(lambda: client.chat.completions.create(model="", messages=messages, max_tokens=3, temperature=0))
    # The request waits for the window's reply, and the window says so (dialog and status bar); read from
    # the signal, as the line goes once the engine takes the request up (under load, between two polls).
    qtbot.waitUntil(lambda: any("waits for the window's reply" in line for line in said), timeout=30_000)
    assert "waits for the window's reply" in window.status.currentMessage()
    qtbot.waitUntil(lambda: bool(box) and window.chat.gen is None, timeout=120_000)
    assert "error" not in box, box
    assert box["value"].usage.completion_tokens == 3
    assert said[-1] == "" and dialog.status_label.text() == ""  # cleared when its turn came
    (record,) = window.server_control.server.service.recent
    assert record.waited_s > 0

    # The window's reply is the one it gives with nobody else on the engine: regenerated, it is the same.
    conv_id = window.chat.conv_id
    first = store.get_conversation(conv_id).messages[-1]
    assert first.status == "complete" and first.stats["generated_tokens"] > 0
    window.chat.regenerate()
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=120_000)
    again = store.get_conversation(conv_id).messages[-1]
    assert again.id != first.id and again.content == first.content
    assert window.chat_view.message_widgets()[-1].text() == again.content
    dialog.toggle_button.click()
    qtbot.waitUntil(lambda: not window.server_control.running, timeout=20_000)
    dialog.close()
    dispose(qtbot, window, store)


def test_preferences_open_the_server_dialog_and_show_its_state(qtbot, window):
    from app.gui.server_panel import ServerDialog

    prefs = window.dialogs.preferences_dialog()
    assert prefs.server_label.text() == "off"
    prefs.server_button.click()
    opened = [d for d in window.dialogs.open_dialogs if isinstance(d, ServerDialog)]
    assert len(opened) == 1 and opened[0].url_label.text() == "not running"
    opened[0].port_box.setValue(_free_port())
    opened[0].toggle_button.click()
    qtbot.waitUntil(lambda: window.server_control.running, timeout=10_000)
    assert prefs.server_label.text() == f"on at {window.server_control.url()}"
    opened[0].toggle_button.click()
    qtbot.waitUntil(lambda: prefs.server_label.text() == "off", timeout=20_000)
    opened[0].close()
    prefs.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_request_cell_is_shown_whole_but_the_model_which_has_its_tooltip(qtbot, window):
    from app.gui.server_panel import COLUMNS, ServerDialog
    from app.server.service import RequestRecord

    dialog = ServerDialog(window.server_control, window)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    model = "mlx-community/Qwen2.5-Coder-32B-Instruct-4bit"
    dialog.add_record(RequestRecord("127.0.0.1:56432", model, 12_345, 12_001, 64, 0.26, "length", 3.1))
    table, metrics = dialog.table, dialog.table.fontMetrics()
    qtbot.waitUntil(lambda: table.columnWidth(0) > 0)
    for column, name in enumerate(COLUMNS):
        item = table.item(0, column)
        if name == "Model":
            assert item.toolTip() == model
            continue
        # seen on X: "127.0.0.1:56…" in equal columns
        assert table.visualItemRect(item).width() >= metrics.horizontalAdvance(item.text()), (name, item.text())
    assert dialog.port_box.width() < dialog.width() // 3  # a port, not a line of text
