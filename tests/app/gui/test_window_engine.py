"""The main flow on the real Engine and the tiny model: send → stream → stop → regenerate →
edit → export in every format → close → a new window on the same data finds everything."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from tests.app_helpers import dispose

pytestmark = pytest.mark.qt


def open_window(qtbot, model_path=None):
    from app.core.store import Store
    from app.gui.window import MainWindow
    from engine.api import Engine

    store = Store()
    window = MainWindow(store, Engine())  # not qtbot.addWidget: dispose() deletes it
    window.show()
    task = window.start_engine(str(model_path) if model_path else None)
    qtbot.waitUntil(task.done, timeout=120_000)
    assert task.exception() is None
    return store, window


def close_window(qtbot, store, window):
    dispose(qtbot, window, store)


def idle(window):
    return window.chat.gen is None and not window.bridge.is_generating()


def send(qtbot, window, text):
    window.composer.set_text(text)
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: idle(window), timeout=120_000)


def test_main_flow_on_the_real_engine(qtbot, qloop, tiny_model_path, tmp_path):
    from app.core.settings import DEFAULTS_KEY

    store, window = open_window(qtbot, tiny_model_path)
    assert window.bridge.current_model is not None, window.notices.texts()
    assert window.composer.is_ready() and window.status.state_label.text() == "Ready"
    store.set_state(DEFAULTS_KEY, {"max_tokens": 6, "temperature": 0.0})

    # Send and stream.
    send(qtbot, window, "Hello, how are you today?")
    conv_id = window.chat.conv_id
    msgs = store.get_conversation(conv_id).messages
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "complete")]
    assert msgs[1].stats["generated_tokens"] >= 1
    assert window.chat_view.message_widgets()[-1].text() == msgs[1].content
    assert "tok/s" in window.chat_view.message_widgets()[-1].stats_label.text()
    assert window.status.context_label.text().startswith("Context ")

    # Stop keeps what was generated.
    window.dialogs.save_chat_settings(conv_id, {"max_tokens": 4000, "temperature": 0.0})
    window.composer.set_text("Tell me a story about a cat and a long journey.")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is not None and len(window.chat.gen.text) > 0, timeout=60_000)
    window.stop_action.trigger()
    qtbot.waitUntil(lambda: idle(window), timeout=60_000)
    stopped = store.get_conversation(conv_id).messages[-1]
    assert stopped.status == "stopped" and stopped.stats["finish_reason"] == "cancelled"
    assert stopped.content and stopped.stats["generated_tokens"] < 4000
    assert window.chat_view.message_widgets()[-1].text() == stopped.content

    # Regenerate replaces the last reply.
    window.dialogs.save_chat_settings(conv_id, {"max_tokens": 5, "temperature": 0.0})
    window.chat.regenerate()
    qtbot.waitUntil(lambda: idle(window), timeout=60_000)
    msgs = store.get_conversation(conv_id).messages
    assert len(msgs) == 4 and msgs[-1].id != stopped.id and msgs[-1].status == "complete"

    # Edit the first message: everything after it is replaced.
    window.chat_view.message_widgets()[0].edit_button.click()
    window.composer.set_text("What is the capital of France?")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: idle(window), timeout=60_000)
    msgs = store.get_conversation(conv_id).messages
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].content == "What is the capital of France?" and msgs[1].status == "complete"
    final = [(m.role, m.content, m.status) for m in msgs]

    # Export in every format.
    for fmt in ("md", "json", "html", "txt", "pdf"):
        target = tmp_path / f"chat.{fmt}"
        assert window.dialogs.export_to(str(target), fmt), window.notices.texts()
        assert target.stat().st_size > 0
    assert "What is the capital of France?" in (tmp_path / "chat.md").read_text("utf-8")
    assert (tmp_path / "chat.pdf").read_bytes().startswith(b"%PDF")
    model_id = window.bridge.current_model.id
    close_window(qtbot, store, window)

    # A new window on the same data dir finds the conversation, the model and the JSON import.
    store, window = open_window(qtbot)
    assert window.chat.conv_id == conv_id
    assert [(w.role, w.text()) for w in window.chat_view.message_widgets()] == [(r, c) for r, c, _ in final]
    assert [(m.role, m.content, m.status) for m in store.get_conversation(conv_id).messages] == final
    assert window.bridge.current_model is not None and window.bridge.current_model.id == model_id
    assert window.dialogs.import_from(str(tmp_path / "chat.json"))
    assert window.chat.conv_id != conv_id and len(window.sidebar.ids()) == 2
    close_window(qtbot, store, window)


@pytest.mark.starter
def test_starter_model_loads_by_default_and_answers(qtbot, qloop):
    from app.core.settings import DEFAULTS_KEY

    store, window = open_window(qtbot)
    info = window.bridge.current_model
    assert info is not None and info.id == "smollm2-135m-instruct", window.notices.texts()
    assert window.model_menu.action_for(info.id).isChecked()
    store.set_state(DEFAULTS_KEY, {"max_tokens": 12, "temperature": 0.0})
    send(qtbot, window, "What is the capital of France?")
    reply = store.get_conversation(window.chat.conv_id).messages[-1]
    assert reply.status == "complete" and reply.content.strip() and reply.model_id == info.id
    assert window.chat_view.message_widgets()[-1].who_label.full_text() == info.name
    close_window(qtbot, store, window)
