"""Servers in the window: the Connect to Server dialog (on the real Engine, against the stdlib
stand-in server) and server models in the Model menu. The chat itself runs against a real
mlx_lm.server in test_remote_mlx_server.py."""

import pytest

from engine import Engine, ModelInfo
from engine.remote import servers
from tests.remote_standin import MODELS, StandIn

pytestmark = pytest.mark.qt


@pytest.fixture(autouse=True)
def no_keychain(monkeypatch):
    monkeypatch.setenv("CHINWAG_KEYRING", "0")


def settle(qtbot, dialog, bridge):
    qtbot.waitUntil(lambda: bridge.pending() == 0 and not dialog.busy, timeout=30_000)
    return dialog.message.text()


def test_server_dialog_adds_edits_and_removes_servers(qtbot, qloop):
    from app.gui.engine_bridge import EngineBridge
    from app.gui.models.server_dialog import ServerDialog

    bridge = EngineBridge(Engine())
    listed = []
    bridge.modelsListed.connect(listed.append)
    with StandIn() as s:
        dialog = ServerDialog(bridge)
        qtbot.addWidget(dialog)
        settle(qtbot, dialog, bridge)
        assert dialog.server_list.count() == 0

        dialog.name_edit.setText("lab")
        dialog.url_edit.setText("ftp://lab")
        dialog.save()
        assert settle(qtbot, dialog, bridge).startswith("not a server URL: 'ftp://lab'")
        assert servers.list_servers() == []

        dialog.url_edit.setText(s.url.removesuffix("/v1"))
        dialog.key_edit.setText("key-1")
        dialog.save()
        text = settle(qtbot, dialog, bridge)
        assert text.startswith(f"Connected to lab: {len(MODELS)} model(s) (chat, reasoning")
        assert "key-1" not in text and dialog.key_edit.text() == ""
        assert dialog.server_list.count() == 1 and "API key saved" in dialog.server_list.item(0).text()
        assert servers.get_server("lab").api_key == "key-1"
        assert {m.id for m in listed[-1]} >= {"lab/chat", "lab/reasoning"}

        # Edit: rename, the key typed nowhere, so it is kept.
        dialog.server_list.setCurrentRow(0)
        assert dialog.name_edit.text() == "lab" and dialog.url_edit.text() == s.url
        dialog.name_edit.setText("lab2")
        dialog.save()
        assert settle(qtbot, dialog, bridge).startswith("Connected to lab2")
        assert [x.name for x in servers.list_servers()] == ["lab2"] and servers.get_server("lab2").api_key == "key-1"

        # A server that does not answer is saved, with the reason it is unreachable.
        dialog.new_server()
        dialog.name_edit.setText("gone")
        dialog.url_edit.setText("http://127.0.0.1:9")
        dialog.save()
        assert settle(qtbot, dialog, bridge).startswith("Saved gone, but it is not reachable: connection refused")
        [gone] = [m for m in listed[-1] if m.server == "gone"]
        assert gone.status == "unusable"

        dialog.server_list.setCurrentRow(0)
        dialog.remove_selected()
        assert settle(qtbot, dialog, bridge) == "Removed lab2 and its API key."
        assert [x.name for x in servers.list_servers()] == ["gone"]
        assert not any(m.server == "lab2" for m in listed[-1])
        assert servers.api_key("lab2") == ""


def test_model_menu_lists_server_models_under_the_server_name(qtbot):
    from app.gui.models.menu import ModelMenu
    from app.gui.models.model_list import ModelList

    models = ModelList()
    menu = ModelMenu(models)
    qtbot.addWidget(menu)
    chosen = []
    models.modelChosen.connect(chosen.append)
    local = ModelInfo("tiny", "Tiny", "/m/tiny", source="folder")
    remote = [
        ModelInfo("studio/qwen3-32b", "qwen3-32b on studio", "http://studio:8080/v1", source="server", server="studio"),
        ModelInfo(
            "studio/default_model", "default_model on studio", "http://studio:8080/v1", source="server", server="studio"
        ),
        ModelInfo(
            "lab/",
            "lab",
            "http://lab:8000/v1",
            status="unusable",
            source="server",
            server="lab",
            reason="unreachable: connection refused at http://lab:8000/v1 (is the server running?)",
        ),
    ]
    models.set_models([local, *remote], current_id="studio/qwen3-32b")
    texts = [a.text() for a in menu.actions()]
    assert texts.index("studio") < texts.index("qwen3-32b") < texts.index("default_model") < texts.index("lab")
    assert texts.index("Tiny") < texts.index("studio")
    assert "Connect to Server…" in texts
    assert menu.action_for("studio/qwen3-32b").isChecked()
    down = menu.action_for("lab/")
    assert down.text() == "Not reachable" and not down.isEnabled() and "connection refused" in down.toolTip()
    menu.action_for("studio/default_model").trigger()
    assert chosen == ["studio/default_model"]


def test_a_servers_reasoning_block_and_prefill_progress_show_in_the_window(qtbot, qloop):
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    from app.core.store import Store
    from app.gui.chat.markdown_view import ThinkBlock
    from app.gui.window import MainWindow
    from tests.app_helpers import dispose

    store = Store()
    with StandIn() as s:
        window = MainWindow(store, Engine())
        window.show()
        task = window.start_engine(f"{s.url}#reasoning")
        qtbot.waitUntil(task.done, timeout=60_000)
        assert window.bridge.current_model.name == f"reasoning on {s.url.removeprefix('http://').removesuffix('/v1')}"
        assert window.chat_view.welcome.model_label.text().endswith(f"served by {s.url}.")
        for text in ("2+2?", "and 3+3?"):
            window.composer.set_text(text)
            QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
            qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=30_000)
        reply = window.chat_view.message_widgets()[-1]
        [think] = [w for w in reply.body.widgets() if isinstance(w, ThinkBlock)]
        assert think.toggle.text().startswith("Reasoning (4 words)")
        assert "The answer is 4." in reply.text()
        # The second request sent the first reply as the server sent it, without the Reasoning block.
        assert s.requests[-1][2]["messages"][1] == {"role": "assistant", "content": "The answer is 4."}

        # mlx_lm.server's keepalive comments during the prefill: "Reading your message… N%".
        reading = []
        window.chat.readingProgress.connect(lambda p: reading.append(p and (p.done, p.total)))
        window.load_model(f"{s.url}#keepalive")
        qtbot.waitUntil(
            lambda: window.bridge.current_model.id.endswith("#keepalive") and window.bridge.state == "ready",
            timeout=30_000,
        )
        window.composer.set_text("hi")
        QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=30_000)
        assert [r for r in reading if r] == [(100, 300), (200, 300), (300, 300)]
        dispose(qtbot, window, store)


def test_server_dialog_says_where_the_key_went(qtbot, qloop, monkeypatch):
    from app.gui.engine_bridge import EngineBridge
    from app.gui.models.server_dialog import ServerDialog
    from tests.keychains import LockedKeychain, MemoryKeychain, use_keychain

    bridge = EngineBridge(Engine())
    with StandIn() as s:
        dialog = ServerDialog(bridge)
        qtbot.addWidget(dialog)
        settle(qtbot, dialog, bridge)
        with use_keychain(monkeypatch, MemoryKeychain()):
            dialog.name_edit.setText("lab")
            dialog.url_edit.setText(s.url)
            dialog.key_edit.setText("key-1")
            dialog.save()
            text = settle(qtbot, dialog, bridge)
            assert text.startswith("Connected to lab") and text.endswith("API key kept in the system keychain.")
        with use_keychain(monkeypatch, LockedKeychain()):
            dialog.key_edit.setText("key-2")
            dialog.save()
            text = settle(qtbot, dialog, bridge)
            assert text.endswith(f"API key kept in {servers.keys_file()} (readable only by you).")
            assert servers.get_server("lab").api_key == "key-2"
            # Saving again without typing a key says nothing about keys.
            dialog.save()
            assert "API key" not in settle(qtbot, dialog, bridge)
