"""The window's own behaviour, on a fake engine: streaming, stop, edit, sidebar, composer."""

import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from app.gui.chat.view import RENDER_HZ
from tests.app_helpers import FakeEngine, run, send

pytestmark = pytest.mark.qt


def messages(store, w):
    return store.get_conversation(w.chat.conv_id).messages


def test_send_streams_saves_and_shows_stats(qtbot, window, store, engine):
    engine.reply = "Hello **world**, this is a streamed reply with several words in it."
    engine.token_delay = 0.02
    send(qtbot, window, "Hi there, first message", wait=False)
    # The user message is in the store before the reply starts.
    msgs = messages(store, window)
    assert [m.role for m in msgs[:1]] == ["user"] and msgs[0].content == "Hi there, first message"
    assert msgs[1].status == "streaming"
    assert window.composer.stop_button.isVisible() and window.status.state_label.text() == "Generating…"
    qtbot.waitUntil(lambda: 0 < len(window.chat_view.live_text()) < len(engine.reply), timeout=5000)
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=10_000)
    msgs = messages(store, window)
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "complete")]
    assert msgs[1].content == engine.reply
    assert msgs[1].stats["generated_tokens"] > 0 and "prompt_ids" not in msgs[1].stats
    reply = window.chat_view.message_widgets()[-1]
    assert reply.text() == engine.reply
    footer = reply.stats_label.text()
    assert "tokens" in footer and "tok/s" in footer and "first token" in footer
    assert window.status.context_label.text().startswith("Context ") and "/ 2,048" in window.status.context_label.text()
    assert window.status.kv_label.text().startswith("KV ")
    assert window.status.state_label.text() == "Ready"
    assert window.sidebar.titles() == ["Hi there, first message"]
    assert window.windowTitle().startswith("Hi there, first message")
    from PySide6.QtWidgets import QApplication

    strays = [w for w in QApplication.topLevelWidgets() if w.isVisible() and w is not window]
    assert strays == []  # no widget was shown before it had a parent


@pytest.mark.timing
def test_streaming_rerenders_at_most_30_times_a_second(qtbot, window, store, engine):
    from app.core.settings import DEFAULTS_KEY

    store.set_state(DEFAULTS_KEY, {"max_tokens": 4000})  # the whole 3,000-word reply (the fake stops at max tokens)
    engine.reply = " ".join(f"word{i}" for i in range(3000))
    engine.token_delay = 0
    send(qtbot, window, "first")
    first = window.chat_view.message_widgets()[-1]
    first_renders = first.body.renders
    start = time.monotonic()
    send(qtbot, window, "second")
    elapsed = time.monotonic() - start
    live = window.chat_view.message_widgets()[-1]
    assert live.text() == engine.reply
    assert window.chat_view.render_count <= (elapsed * RENDER_HZ + 2) * 2  # two turns
    assert first.body.renders == first_renders  # finished messages are frozen


@pytest.mark.timing
def test_reply_is_saved_while_it_grows(qtbot, window, store, engine):
    engine.reply = " ".join(["tick"] * 400)
    engine.token_delay = 0.01
    send(qtbot, window, "count", wait=False)
    start = time.monotonic()
    qtbot.waitUntil(
        lambda: len(messages(store, window)) == 2 and bool(messages(store, window)[1].content), timeout=3000
    )
    assert time.monotonic() - start < 1.6  # saved at least once a second
    assert messages(store, window)[1].status == "streaming"
    window.chat.stop()
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)


def test_escape_stops_within_a_token_and_keeps_the_text(qtbot, window, store, engine):
    engine.reply = " ".join(f"w{i}" for i in range(500))
    engine.token_delay = 0.01
    send(qtbot, window, "go", wait=False)
    qtbot.waitUntil(lambda: len(window.chat.gen.text) > 20, timeout=5000)
    assert window.stop_action.isEnabled()
    window.activateWindow()
    window.stop_action.trigger()  # what Esc does
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)
    reply = messages(store, window)[1]
    assert reply.status == "stopped"
    assert 20 < len(reply.content) < len(engine.reply)
    assert window.chat_view.message_widgets()[-1].text() == reply.content
    assert "Stopped" in window.chat_view.message_widgets()[-1].stats_label.text()
    assert window.stop_action.shortcut().toString() == "Esc"


def test_composer_enter_shift_enter_and_whitespace(qtbot, window, store, engine):
    editor = window.composer.editor
    editor.setFocus()
    QTest.keyClicks(editor, "line one")
    QTest.keyClick(editor, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClicks(editor, "line two")
    assert window.composer.text() == "line one\nline two"
    window.composer.set_text("   \n\t  ")
    QTest.keyClick(editor, Qt.Key.Key_Return)
    assert window.chat.conv_id is None and engine.calls == []
    assert not window.composer.send_button.isEnabled()
    window.composer.set_text("line one\nline two")
    QTest.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and bool(engine.calls), timeout=5000)
    assert messages(store, window)[0].content == "line one\nline two"
    assert window.composer.text() == ""


def test_message_sent_while_loading_is_queued_then_sent(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    engine.load_delay = 0.3
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    assert not w.composer.is_ready() and "Starting" in w.composer.reason_label.text()
    task = w.start_engine("fake-small")
    qtbot.waitUntil(lambda: w.bridge.state == "loading", timeout=3000)
    assert not w.composer.is_ready() and "Loading" in w.composer.reason_label.text()
    assert w.status.progress.isVisible()
    assert w.composer.send_button.text() == "Queue"
    w.composer.set_text("typed ahead")
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    # Not ignored: saved, shown as queued, and sent once the model is ready.
    assert engine.calls == [] and w.composer.text() == ""
    (queued,) = w.chat_view.message_widgets()
    assert queued.text() == "typed ahead" and "Queued" in queued.stats_label.text()
    assert [m.content for m in store.get_conversation(w.chat.conv_id).messages] == ["typed ahead"]
    assert w.sidebar.titles() == ["typed ahead"]
    qtbot.waitUntil(task.done, timeout=5000)
    assert w.composer.is_ready() and not w.composer.reason_label.isVisible()
    assert not w.status.progress.isVisible()
    qtbot.waitUntil(lambda: w.chat.gen is None and len(w.chat_view.message_widgets()) == 2, timeout=5000)
    assert engine.calls[0][1][-1] == {"role": "user", "content": "typed ahead"}
    assert "Queued" not in queued.stats_label.text()
    assert w.chat_view.message_widgets()[1].text() == engine.reply
    w.close()
    run(qtbot, w.shutdown())


def test_regenerate_and_edit(qtbot, window, store, engine):
    n = {"i": 0}

    def reply(_messages):
        n["i"] += 1
        return f"reply number {n['i']}"

    engine.reply = reply
    send(qtbot, window, "question one")
    send(qtbot, window, "question two")
    assert [m.content for m in messages(store, window)] == [
        "question one",
        "reply number 1",
        "question two",
        "reply number 2",
    ]
    last = window.chat_view.message_widgets()[-1]
    assert last.regen_button.isVisible()
    assert not window.chat_view.message_widgets()[1].regen_button.isVisible()
    last.regen_button.click()
    qtbot.waitUntil(lambda: window.chat.gen is None and n["i"] == 3, timeout=5000)
    assert [m.content for m in messages(store, window)][-1] == "reply number 3"
    assert len(messages(store, window)) == 4
    # The engine got the history without the replaced reply.
    assert [m["content"] for m in engine.calls[-1][1]] == ["question one", "reply number 1", "question two"]

    first_user = window.chat_view.message_widgets()[0]
    first_user.edit_button.click()
    assert window.composer.text() == "question one" and window.composer.edit_bar.isVisible()
    window.composer.set_text("question one, edited")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and n["i"] == 4, timeout=5000)
    assert [m.content for m in messages(store, window)] == ["question one, edited", "reply number 4"]
    assert [w.text() for w in window.chat_view.message_widgets()] == ["question one, edited", "reply number 4"]
    assert not window.composer.edit_bar.isVisible()


def test_copy_message_and_code_block(qtbot, window, engine):
    engine.reply = "Here:\n\n```python\nprint('hi')\n```\n\nbye"
    send(qtbot, window, "code please")
    reply = window.chat_view.message_widgets()[-1]
    reply.copy_button.click()
    assert QGuiApplication.clipboard().text() == engine.reply
    from app.gui.chat.markdown_view import CodeBlock

    code = [w for w in reply.body.widgets() if isinstance(w, CodeBlock)]
    assert len(code) == 1 and code[0].lang_label.text() == "python"
    code[0].copy_button.click()
    assert QGuiApplication.clipboard().text() == "print('hi')"


def test_think_block_is_collapsible_and_dimmed(qtbot, window, engine):
    from app.gui.chat.markdown_view import ThinkBlock

    engine.reply = "<think>The user says hi. I should greet.</think>\n\nHello!"
    send(qtbot, window, "hi")
    body = window.chat_view.message_widgets()[-1].body
    think = [w for w in body.widgets() if isinstance(w, ThinkBlock)]
    assert len(think) == 1
    block = think[0]
    assert not block.is_expanded() and not block.body.isVisible()
    assert "Reasoning" in block.toggle.text()
    block.toggle.click()
    assert block.is_expanded() and block.body.isVisible()
    assert "I should greet" in block.body.toPlainText()
    from PySide6.QtGui import QPalette

    dim = block.body.palette().color(QPalette.ColorRole.Text)
    assert dim != window.palette().color(QPalette.ColorRole.Text)
    block.toggle.click()
    assert not block.body.isVisible()


def test_sidebar_order_rename_delete_undo_and_search(qtbot, window, store, engine):
    engine.reply = "ok"
    send(qtbot, window, "apples are red")
    window.new_action.trigger()
    assert window.chat.conv_id is None and window.chat_view.message_widgets() == []
    send(qtbot, window, "bananas are yellow")
    window.new_action.trigger()
    send(qtbot, window, "cherries")
    assert window.sidebar.titles() == ["cherries", "bananas are yellow", "apples are red"]
    # Activity moves a chat to the top.
    apples = window.sidebar.ids()[2]
    window.chat.open_conversation(apples)
    send(qtbot, window, "and green")
    assert window.sidebar.titles()[0] == "apples are red"

    window.chat.rename(apples, "Fruit talk")
    assert window.sidebar.titles()[0] == "Fruit talk"
    assert store.get_conversation(apples).title == "Fruit talk"

    # Search covers titles and message text.
    window.sidebar.search.setText("yellow")
    qtbot.waitUntil(lambda: window.sidebar.titles() == ["bananas are yellow"], timeout=2000)
    window.sidebar.search.setText("fruit")
    qtbot.waitUntil(lambda: window.sidebar.titles() == ["Fruit talk"], timeout=2000)
    window.sidebar.search.setText("")
    qtbot.waitUntil(lambda: len(window.sidebar.titles()) == 3, timeout=2000)

    # Delete hides at once, Undo brings it back; without Undo it is gone for good.
    window.chat.delete(apples)
    assert "Fruit talk" not in window.sidebar.titles()
    assert window.chat.conv_id is None
    undo = window.notices.bar("undo")
    assert undo is not None and "Fruit talk" in undo.text()
    undo.action_button.click()
    assert window.sidebar.titles()[0] == "Fruit talk" and window.chat.conv_id == apples
    bananas = window.sidebar.ids()[2]
    window.chat.delete(bananas)
    window.chat._commit_delete(bananas)  # what the Undo timer does when it runs out
    assert [s.id for s in store.list_conversations()].count(bananas) == 0
    qtbot.waitUntil(lambda: bananas in engine.forgotten, timeout=2000)


def test_rename_in_place(qtbot, window, store, engine):
    engine.reply = "ok"
    send(qtbot, window, "to be renamed")
    item = window.sidebar.list.item(0)
    item.setText("Renamed   inline")
    assert store.get_conversation(window.chat.conv_id).title == "Renamed inline"


def test_shortcuts_use_standard_keys(window):
    from PySide6.QtGui import QKeySequence

    assert window.new_action.shortcut() == QKeySequence(QKeySequence.StandardKey.New)
    assert window.new_action.shortcut().toString() == "Ctrl+N"
    assert window.find_action.shortcut().toString() == "Ctrl+F"
    assert window.prefs_action.shortcut().toString() in (
        "Ctrl+,",
        QKeySequence(QKeySequence.StandardKey.Preferences).toString(),
    )
    assert window.export_action.shortcut().toString() == "Ctrl+Shift+E"
    window.find_action.trigger()
    assert window.sidebar.search.hasFocus() or window.focusWidget() is window.sidebar.search


def test_model_menu_lists_checks_and_switches(qtbot, window, store, engine):
    menu = window.model_menu
    names = [a.text() for a in menu.model_actions]
    assert names[0] == "Fake Small — 270.0 MB · Q8_0" and names[1] == "Fake Big — 4.0 GB · 4-bit"
    assert menu.action_for("fake-small").isChecked() and not menu.action_for("fake-big").isChecked()
    broken = menu.action_for("broken")
    assert not broken.isEnabled() and broken.toolTip() == "config.json is missing"
    labels = [a.text() for a in menu.actions()]
    for entry in ("Import GGUF…", "Add Model Folder…", "Download from Hugging Face…", "Show Models Folder"):
        assert entry in labels

    engine.reply = "small says hi"
    send(qtbot, window, "before switching")
    conv = window.chat.conv_id
    menu.action_for("fake-big").trigger()
    qtbot.waitUntil(lambda: engine.current_model.id == "fake-big" and window.bridge.state == "ready", timeout=3000)
    assert menu.action_for("fake-big").isChecked() and not menu.action_for("fake-small").isChecked()
    assert window.status.model_label.text() == "Fake Big"
    assert store.get_state("last_model") == "fake-big"
    assert window.chat.conv_id == conv and len(messages(store, window)) == 2
    send(qtbot, window, "after switching")
    assert messages(store, window)[-1].model_id == "fake-big"

    # A failing load says why, and the previous model stays loaded.
    engine.fail_load["fake-small"] = "weights are corrupt at model.safetensors"
    menu.action_for("fake-small").trigger()
    qtbot.waitUntil(lambda: window.notices.bar("load") is not None, timeout=3000)
    text = window.notices.bar("load").text()
    assert "weights are corrupt" in text and "Fake Big is still loaded" in text
    assert engine.current_model.id == "fake-big" and menu.action_for("fake-big").isChecked()
    assert window.composer.is_ready()


def test_export_names_the_model_as_the_window_does(qtbot, window, tmp_path):
    send(qtbot, window, "hello")
    assert window.dialogs.export_to(str(tmp_path / "chat.md"), "md"), window.notices.texts()
    text = (tmp_path / "chat.md").read_text(encoding="utf-8")
    model = window.bridge.current_model
    assert model.name != model.id and f"*{model.name}" in text and model.id not in text


def test_download_offline_and_show_folder(qtbot, window, monkeypatch):
    dialog = window.dialogs.download_dialog()
    dialog.repo.setText("mlx-community/Some-Model")
    dialog.start_button.click()
    assert dialog.running and dialog.progress.isVisible()
    qtbot.waitUntil(lambda: not dialog.running, timeout=3000)
    assert "offline" in dialog.message.text() and dialog.message.text()[0].isupper()
    assert "Download failed" not in " ".join(window.notices.texts())  # said once, in the dialog
    dialog.reject()

    opened = []
    monkeypatch.setattr("app.gui.window_dialogs.open_url", lambda url: opened.append(url.toLocalFile()) or True)
    window.dialogs.show_models_folder()
    from engine.paths import models_dir

    assert opened == [str(models_dir())]


def test_chat_settings_reach_the_engine(qtbot, window, store, engine):
    engine.reply = "ok"
    send(qtbot, window, "first")
    dialog = window.dialogs.chat_settings_dialog()
    dialog.system_prompt.setPlainText("You are terse.")
    dialog.fields["temperature"].setValue(0.2)
    dialog.fields["top_k"].setValue(40)
    dialog.fields["max_tokens"].setValue(64)
    dialog.fields["context_cap"].setValue(1024)
    dialog.accept()
    send(qtbot, window, "second")
    _conv, sent, params = engine.calls[-1]
    assert sent[0] == {"role": "system", "content": "You are terse."}
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert params.temperature == pytest.approx(0.2) and params.top_k == 40
    assert params.max_tokens == 64 and params.context_cap == 1024
    # Each reply keeps which prompt it was written with: exports show the prompt where it took effect.
    from app.core.turns import PROMPT_KEY, prompt_digest

    qtbot.waitUntil(lambda: all(m.stats for m in store.get_conversation(window.chat.conv_id).messages[1::2]))
    replies = [m for m in store.get_conversation(window.chat.conv_id).messages if m.role == "assistant"]
    assert [m.stats[PROMPT_KEY] for m in replies] == ["", prompt_digest("You are terse.")]
    # Only overrides are stored; Preferences defaults apply to other chats.
    settings = store.get_conversation(window.chat.conv_id).settings
    assert settings["temperature"] == pytest.approx(0.2) and "top_p" not in settings

    prefs = window.dialogs.preferences_dialog()
    prefs.fields["top_p"].setValue(0.9)
    prefs.fields["max_tokens"].setValue(99)
    prefs.accept()
    window.new_action.trigger()
    send(qtbot, window, "another chat")
    params = engine.calls[-1][2]
    assert params.top_p == pytest.approx(0.9) and params.max_tokens == 99
    assert params.temperature == pytest.approx(0.7) and params.context_cap is None


def test_restores_last_model_and_conversation(qtbot, qloop, window, store, engine):
    from app.gui.window import MainWindow

    engine.reply = "remember me"
    send(qtbot, window, "one")
    window.new_action.trigger()
    send(qtbot, window, "two")
    first = [s.id for s in store.list_conversations()][-1]
    window.chat.open_conversation(first)
    window.model_menu.action_for("fake-big").trigger()
    qtbot.waitUntil(lambda: window.status.model_label.text() == "Fake Big", timeout=3000)

    engine2 = FakeEngine()
    w2 = MainWindow(store, engine2)
    qtbot.addWidget(w2)
    w2.show()
    assert w2.chat.conv_id == first
    assert [m.text() for m in w2.chat_view.message_widgets()] == ["one", "remember me"]
    run(qtbot, w2.start_engine())
    assert engine2.current_model.id == "fake-big"
    w2.close()
    run(qtbot, w2.shutdown())
