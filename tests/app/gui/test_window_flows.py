"""More window flows on the fake engine: switching chats mid-reply, long chats, model imports."""

import asyncio

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from engine.errors import CancelledDownload
from tests.app_helpers import send

pytestmark = pytest.mark.qt


def test_switching_chats_while_a_reply_streams(qtbot, window, store, engine):
    engine.reply = "short"
    send(qtbot, window, "other chat")
    other = window.chat.conv_id
    window.new_action.trigger()
    engine.reply = " ".join(f"t{i}" for i in range(150))
    engine.token_delay = 0.01
    send(qtbot, window, "long one", wait=False)
    streaming = window.chat.conv_id
    qtbot.waitUntil(lambda: len(window.chat.gen.text) > 10, timeout=5000)
    window.chat.open_conversation(other)
    assert [w.text() for w in window.chat_view.message_widgets()] == ["other chat", "short"]
    assert not window.chat_view.is_streaming()
    window.chat.open_conversation(streaming)
    assert window.chat_view.is_streaming()
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=10_000)
    assert window.chat_view.message_widgets()[-1].text() == engine.reply
    assert store.get_conversation(streaming).messages[-1].content == engine.reply
    assert store.get_conversation(other).messages[-1].content == "short"


def test_deleting_the_streaming_chat_stops_it(qtbot, window, store, engine):
    engine.reply = " ".join(f"t{i}" for i in range(300))
    engine.token_delay = 0.01
    send(qtbot, window, "doomed", wait=False)
    conv = window.chat.conv_id
    qtbot.waitUntil(lambda: len(window.chat.gen.text) > 5, timeout=5000)
    window.chat.delete(conv)
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)
    window.chat._commit_delete(conv)
    assert store.list_conversations() == []


def test_long_conversation_opens_the_latest_page(qtbot, window, store):
    from app.gui.chat.view import PAGE

    conv = store.create_conversation("long")
    for i in range(60):
        store.add_message(conv.id, "user", f"q{i}")
        store.add_message(conv.id, "assistant", f"a{i}")
    window.chat.refresh_list()
    window.chat.open_conversation(conv.id)
    shown = window.chat_view.message_widgets()
    assert len(shown) == PAGE and shown[-1].text() == "a59"
    assert window.chat_view.more_button.isVisible()
    window.chat_view.more_button.click()
    window.chat_view.more_button.click()
    texts = [w.text() for w in window.chat_view.message_widgets()]
    assert len(texts) == 120 and texts[:2] == ["q0", "a0"] and texts[-1] == "a59"
    assert not window.chat_view.more_button.isVisible()


def test_import_gguf_and_add_folder_offer_to_load(qtbot, window, engine, tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    dialog = window.dialogs.import_gguf_dialog()
    dialog.fileSelected.emit(str(gguf))
    dialog.reject()
    qtbot.waitUntil(lambda: window.notices.bar("model-task") is not None, timeout=3000)
    bar = window.notices.bar("model-task")
    assert bar.text() == "Imported Imported X."
    assert window.model_menu.action_for("imported-x") is not None
    bar.action_button.click()
    qtbot.waitUntil(lambda: engine.current_model.id == "imported-x", timeout=3000)

    dialog = window.dialogs.import_gguf_dialog()
    dialog.fileSelected.emit(str(tmp_path / "notes.txt"))
    dialog.reject()
    qtbot.waitUntil(lambda: window.notices.bar("error") is not None, timeout=3000)
    assert "Import failed" in window.notices.bar("error").text() and "not a GGUF" in window.notices.bar("error").text()

    dialog = window.dialogs.add_folder_dialog()
    dialog.fileSelected.emit(str(tmp_path))
    dialog.reject()
    qtbot.waitUntil(lambda: window.model_menu.action_for("folder-x") is not None, timeout=3000)


def test_download_can_be_cancelled(qtbot, window, engine):
    async def slow_download(repo_id, progress=None, cancel=None):
        while not cancel.is_set():
            progress and progress(type("P", (), {"stage": "downloading", "done": 1, "total": 10})())
            await asyncio.sleep(0.01)
        raise CancelledDownload(f"download of {repo_id} cancelled")

    engine.download_model = slow_download
    dialog = window.dialogs.download_dialog()
    dialog.repo.setText("not a repo id")
    dialog.start_button.click()
    assert not dialog.running and "owner/name" in dialog.message.text()
    dialog.repo.setText("someone/model")
    dialog.start_button.click()
    qtbot.waitUntil(lambda: dialog.progress.maximum() == 1000 and dialog.progress.value() == 100, timeout=3000)
    dialog.buttons.rejected.emit()  # the Cancel button
    qtbot.waitUntil(lambda: not dialog.running, timeout=3000)
    assert "cancelled" in dialog.message.text()
    dialog.reject()


def test_search_shows_where_it_matched(qtbot, window, store, engine):
    engine.reply = "The capital of France is Paris."
    send(qtbot, window, "capital question")
    window.sidebar.search.setText("paris")
    qtbot.waitUntil(lambda: "Paris" in window.sidebar.list.item(0).toolTip(), timeout=2000)
    assert window.sidebar.titles() == ["capital question"]
    window.sidebar.search.setText("london")
    qtbot.waitUntil(lambda: window.sidebar.titles() == [], timeout=2000)


def test_a_chat_offers_its_own_model_and_esc_cancels_an_edit(qtbot, window, store, engine):
    engine.reply = "from small"
    send(qtbot, window, "small chat")
    small_chat = window.chat.conv_id
    window.model_menu.action_for("fake-big").trigger()
    qtbot.waitUntil(lambda: window.status.model_label.text() == "Fake Big", timeout=3000)
    assert window.notices.bar("conv-model").text() == "This chat last used Fake Small."
    window.new_action.trigger()
    assert window.notices.bar("conv-model") is None
    window.chat.open_conversation(small_chat)
    window.notices.bar("conv-model").action_button.click()
    qtbot.waitUntil(lambda: engine.current_model.id == "fake-small" and window.bridge.state == "ready", timeout=3000)
    assert window.notices.bar("conv-model") is None

    assert not window.stop_action.isEnabled()
    window.chat_view.message_widgets()[0].edit_button.click()
    assert window.stop_action.isEnabled() and window.composer.text() == "small chat"
    window.stop_action.trigger()  # Esc
    assert window.chat.editing is None and window.composer.text() == ""
    assert not window.composer.edit_bar.isVisible() and not window.stop_action.isEnabled()


def test_real_key_presses_for_shortcuts(qtbot, window, store, engine):
    window.activateWindow()
    window.composer.editor.setFocus()
    qtbot.waitUntil(lambda: window.composer.editor.hasFocus(), timeout=2000)
    engine.reply = " ".join(f"w{i}" for i in range(400))
    engine.token_delay = 0.01
    send(qtbot, window, "go", wait=False)
    qtbot.waitUntil(lambda: len(window.chat.gen.text) > 10, timeout=5000)
    from PySide6.QtWidgets import QApplication

    assert QApplication.activeWindow() is window  # no stray top-level widget took over
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)
    assert store.get_conversation(window.chat.conv_id).messages[-1].status == "stopped"
    QTest.keyClick(window.composer.editor, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.chat.conv_id is None
    QTest.keyClick(window.composer.editor, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.sidebar.search.hasFocus()


def test_export_opens_in_documents_or_the_home_folder_never_where_chinwag_started(
    qtbot, window, engine, tmp_path, monkeypatch
):
    from pathlib import Path

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOCUMENTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))  # no user-dirs.dirs: Documents is ~/Documents
    send(qtbot, window, "hello")
    dialog = window.dialogs.export_dialog()
    try:  # seen on X: no ~/Documents, and the dialog opened in the folder chinwag was started from
        assert Path(dialog.directory().absolutePath()) == home
    finally:
        dialog.reject()
    (home / "Documents").mkdir()
    dialog = window.dialogs.export_dialog()
    try:
        assert Path(dialog.directory().absolutePath()) == home / "Documents"
        assert dialog.selectedFiles()[0].endswith(".md")
    finally:
        dialog.reject()
