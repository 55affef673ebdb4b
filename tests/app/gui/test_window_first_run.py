"""Issue 7's first five minutes: focus, the welcome state, drafts, the header, search, keys."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest

from tests.app_helpers import FakeEngine, run, send

pytestmark = pytest.mark.qt


def focused(w):
    return w.focusWidget()


def test_focus_is_in_the_composer_at_start_and_after_each_action(qtbot, window, store, engine):
    editor = window.composer.editor
    assert focused(window) is editor
    # Typing straight away goes to the composer, and Enter sends it.
    QTest.keyClicks(focused(window), "hello straight away")
    QTest.keyClick(focused(window), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and len(window.chat_view.message_widgets()) == 2, timeout=5000)
    assert window.chat_view.message_widgets()[0].text() == "hello straight away"
    first = window.chat.conv_id

    window.sidebar.search.setFocus()
    window.new_action.trigger()
    assert focused(window) is editor
    send(qtbot, window, "second chat")

    # Clicking a chat in the list opens it and puts the cursor in the composer.
    window.sidebar.search.setFocus()
    item = window.sidebar._item(first)
    rect = window.sidebar.list.visualItemRect(item)
    QTest.mouseClick(window.sidebar.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.chat.conv_id == first and focused(window) is editor

    # Arrow keys in the list keep the focus there (keyboard browsing).
    window.sidebar.list.setFocus()
    QTest.keyClick(window.sidebar.list, Qt.Key.Key_Up)
    assert window.chat.conv_id != first and focused(window) is window.sidebar.list

    # Undo of a delete (a click on the banner's button) returns to the composer.
    conv = window.chat.conv_id
    window.chat.delete(conv)
    window.notices.bar("undo").action_button.setFocus()
    window.notices.bar("undo").action_button.click()
    assert window.chat.conv_id == conv and focused(window) is editor

    # Closing a dialog returns to the composer.
    dialog = window.dialogs.chat_settings_dialog()
    dialog.fields["temperature"].setFocus()
    dialog.reject()
    assert focused(window) is editor
    window.dialogs.shortcuts_dialog().reject()
    assert focused(window) is editor


def test_focus_starts_in_the_composer_after_a_restart(qtbot, qloop, window, store, engine):
    from app.gui.window import MainWindow

    send(qtbot, window, "remembered")
    window.close()
    w2 = MainWindow(store, FakeEngine())
    qtbot.addWidget(w2)
    w2.show()
    assert w2.chat.conv_id is not None and w2.focusWidget() is w2.composer.editor
    w2.close()
    run(qtbot, w2.shutdown())


def test_welcome_state_names_the_model_and_example_prompts_send(qtbot, window, store, engine):
    welcome = window.chat_view.welcome
    assert welcome.isVisible()
    assert "Fake Small" in welcome.model_label.text()
    assert "Ctrl+N" in welcome.findChild(type(welcome.model_label), "welcomeShortcuts").text()
    button = welcome.prompt_buttons[0]
    button.click()
    qtbot.waitUntil(lambda: window.chat.gen is None and len(window.chat_view.message_widgets()) == 2, timeout=5000)
    assert engine.calls[-1][1][-1]["content"] == button.text()
    assert not welcome.isVisible()
    assert window.focusWidget() is window.composer.editor  # the click did not take the focus
    window.new_action.trigger()
    assert welcome.isVisible()


def test_welcome_says_loading_and_never_shows_the_raw_starter_id(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    engine.load_delay = 0.3
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine()  # the starter, by default
    qtbot.waitUntil(lambda: w.bridge.state == "loading", timeout=3000)
    text = w.chat_view.welcome.model_label.text()
    assert "Loading SmolLM2 135M Instruct" in text and "smollm2-135m-instruct" not in text
    assert "smollm2-135m-instruct" not in w.composer.reason_label.text()
    qtbot.waitUntil(task.done, timeout=5000)
    w.close()
    run(qtbot, w.shutdown())


def test_drafts_are_kept_per_chat_and_across_restarts(qtbot, qloop, window, store, engine):
    from app.gui.window import MainWindow

    send(qtbot, window, "chat one")
    one = window.chat.conv_id
    window.composer.editor.setPlainText("half a thought for one")
    window.new_action.trigger()
    assert window.composer.text() == ""
    window.composer.editor.setPlainText("a draft in the blank chat")
    window.chat.open_conversation(one)
    assert window.composer.text() == "half a thought for one"
    window.new_action.trigger()
    assert window.composer.text() == "a draft in the blank chat"
    send(qtbot, window, "chat two")  # sending uses the draft up
    two = window.chat.conv_id
    assert window.composer.text() == ""
    window.chat.open_conversation(one)
    window.composer.editor.setPlainText("edited draft for one")
    window.close()  # quitting saves the open chat's draft

    w2 = MainWindow(store, FakeEngine())
    qtbot.addWidget(w2)
    w2.show()
    assert w2.chat.conv_id == one and w2.composer.text() == "edited draft for one"
    w2.chat.open_conversation(two)
    assert w2.composer.text() == ""
    # Deleting a chat for good deletes its draft too.
    w2.chat.delete(one)
    w2.chat._commit_delete(one)  # what the Undo timer does when it runs out
    assert one not in store.get_state("drafts", {})
    w2.close()
    run(qtbot, w2.shutdown())


def test_editing_a_message_keeps_the_draft(qtbot, window, engine):
    send(qtbot, window, "original")
    window.composer.editor.setPlainText("my draft")
    window.chat_view.message_widgets()[0].edit_button.click()
    assert window.composer.text() == "original"
    window.escape()
    assert window.composer.text() == "my draft"


def test_header_shows_the_whole_title_elided_only_when_drawn(qtbot, window, store, engine):
    long = "A very long question about the history of the printing press in Europe and Asia"
    send(qtbot, window, long)
    conv = store.get_conversation(window.chat.conv_id)
    assert conv.title.endswith("…") and long.startswith(conv.title[:-1])  # cut at a word, and says so
    window.chat.rename(conv.id, long)
    assert store.get_conversation(conv.id).title == long
    assert window.windowTitle() == f"{long} — Chinwag"
    assert window.header.title() == long and window.sidebar.titles()[0] == long
    window.resize(720, 500)
    qtbot.waitUntil(lambda: window.header.title_label.text() != long, timeout=2000)
    assert window.header.title_label.text().endswith("…")  # elided on screen only


def test_custom_system_prompt_marker_in_the_header(qtbot, window, store, engine):
    send(qtbot, window, "hi")
    assert not window.header.prompt_marker.isVisible()
    dialog = window.dialogs.chat_settings_dialog()
    dialog.system_prompt.setPlainText("Talk like a pirate.")
    dialog.accept()
    assert window.header.prompt_marker.isVisible()
    assert "pirate" in window.header.prompt_marker.toolTip()
    dialog = window.dialogs.chat_settings_dialog()
    dialog.reset_button.click()
    dialog.accept()
    assert not window.header.prompt_marker.isVisible()


def test_search_no_match_snippets_and_down_into_results(qtbot, window, store, engine):
    engine.reply = "The capital of France is Paris, a city on the Seine."
    send(qtbot, window, "capital question")
    window.new_action.trigger()
    engine.reply = "ok"
    send(qtbot, window, "something else")
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "seine")
    qtbot.waitUntil(lambda: window.sidebar.titles() == ["capital question"], timeout=2000)
    assert "Seine" in window.sidebar.snippets()[0]
    QTest.keyClick(window.sidebar.search, Qt.Key.Key_Down)
    assert window.focusWidget() is window.sidebar.list and window.sidebar.list.currentRow() == 0
    assert window.chat_view.message_widgets()[0].text() == "capital question"

    window.sidebar.search.setText("zebra crossing")
    qtbot.waitUntil(lambda: window.sidebar.no_match.isVisible(), timeout=2000)
    assert window.sidebar.no_match.text() == "No chats match “zebra crossing”."
    assert not window.sidebar.list.isVisible()
    window.sidebar.search.setText("")
    qtbot.waitUntil(lambda: len(window.sidebar.titles()) == 2, timeout=2000)
    assert not window.sidebar.no_match.isVisible() and window.sidebar.snippets() == ["", ""]


def test_ctrl_z_undoes_a_delete_but_not_inside_text(qtbot, window, store, engine):
    send(qtbot, window, "keep me")
    conv = window.chat.conv_id
    window.new_action.trigger()
    send(qtbot, window, "other chat")
    window.chat.delete(conv)
    assert conv not in window.sidebar.ids() and window.notices.bar("undo") is not None
    window.sidebar.list.setFocus()
    QTest.keyClick(window.sidebar.list, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert conv in window.sidebar.ids() and window.chat.conv_id == conv
    assert window.notices.bar("undo") is None  # the chat is back: no Undo offer left over
    # Deleting the open chat puts the cursor in an empty composer: Ctrl+Z there undoes the delete.
    window.chat.delete(conv)
    assert window.focusWidget() is window.composer.editor and window.composer.text() == ""
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert conv in window.sidebar.ids() and window.chat.conv_id == conv
    # With typing to undo, Ctrl+Z undoes the typing first and the delete stays deleted.
    window.chat.delete(conv)
    QTest.keyClicks(window.composer.editor, "abc")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert window.composer.text() != "abc" and conv not in window.sidebar.ids()


def test_edit_menu_and_copy_last_reply(qtbot, window, engine, monkeypatch):
    import app.gui.copy_feedback as feedback

    monkeypatch.setattr(feedback, "COPIED_MS", 50)
    names = [a.text() for a in window.menuBar().actions()]
    assert names[:3] == ["&File", "&Edit", "&View"] and names[-1] == "&Help"
    edit = [a.text() for a in window.menuBar().actions()[1].menu().actions() if a.text()]
    assert edit[:5] == ["Undo", "Cut", "Copy", "Paste", "Select All"]
    send(qtbot, window, "question")
    window.composer.editor.setFocus()
    QTest.keyClick(
        window.composer.editor, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    )
    assert QGuiApplication.clipboard().text() == engine.reply
    button = window.chat_view.message_widgets()[-1].copy_button
    assert button.toolTip() == "Copied to the clipboard"
    qtbot.waitUntil(lambda: button.toolTip() == "Copy this message", timeout=2000)
    window.composer.editor.setPlainText("select me")
    window.composer.editor.setFocus()
    [a for a in window.findChildren(type(window.undo_action)) if a.objectName() == "editSelectAll"][0].trigger()
    assert window.composer.editor.textCursor().selectedText() == "select me"


def test_code_copy_says_copied_then_resets(qtbot, window, engine, monkeypatch):
    import app.gui.copy_feedback as feedback
    from app.gui.chat.markdown_view import CodeBlock

    monkeypatch.setattr(feedback, "COPIED_MS", 50)
    engine.reply = "```python\nprint(1)\n```"
    send(qtbot, window, "code please")
    (block,) = [w for w in window.chat_view.message_widgets()[-1].body.widgets() if isinstance(w, CodeBlock)]
    block.copy_button.click()
    assert block.copy_button.text() == "Copied" and QGuiApplication.clipboard().text() == "print(1)"
    qtbot.waitUntil(lambda: block.copy_button.text() == "Copy", timeout=2000)


def test_shortcuts_sheet_lists_the_keys(qtbot, window):
    dialog = window.dialogs.shortcuts_dialog()
    keys = dict((what, key) for key, what in dialog.rows)
    assert keys["New chat"] == "Ctrl+N" and keys["Copy the last reply"] == "Ctrl+Shift+C"
    assert window.shortcuts_action.shortcut().toString() == "Ctrl+/"
    dialog.reject()


def test_sidebar_collapses_and_window_has_a_usable_minimum(qtbot, window):
    assert window.minimumSize().width() >= 700 and window.minimumSize().height() >= 450
    window.resize(100, 100)
    assert window.width() >= 700
    assert window.composer.editor.width() > 300
    window.sidebar.list.setFocus()
    QTest.keyClick(
        window.sidebar.list, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    )
    assert not window.sidebar.isVisible() and window.focusWidget() is window.composer.editor
    window.header.sidebar_button.click()
    assert window.sidebar.isVisible()


def test_reading_column_is_centred_and_reflows(qtbot, window, engine):
    from app.gui.theme import READING_WIDTH

    engine.reply = "word " * 400
    send(qtbot, window, "a long answer please")
    reply = window.chat_view.message_widgets()[-1]
    window.resize(1440, 800)
    qtbot.waitUntil(lambda: window.chat_view.column.width() == READING_WIDTH, timeout=2000)
    view = window.chat_view.viewport()
    left = window.chat_view.column.mapTo(view, window.chat_view.column.rect().topLeft()).x()
    right = view.width() - (left + window.chat_view.column.width())
    assert abs(left - right) <= 2 and reply.width() <= READING_WIDTH
    tall = reply.height()
    window.resize(760, 800)
    qtbot.waitUntil(lambda: window.chat_view.column.width() < READING_WIDTH - 100, timeout=2000)
    qtbot.waitUntil(lambda: reply.height() > tall, timeout=2000)  # narrower column, more lines


def test_at_a_bigger_font_size_a_line_of_the_reply_holds_as_many_words(qtbot, window, store, engine):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY

    engine.reply = "word " * 400
    send(qtbot, window, "a long answer please")
    window.keys.sidebar_action.trigger()  # the chat list hidden: room for the wider column
    window.resize(1600, 800)
    column, composer = window.chat_view.column, window.composer.column

    def lines():
        reply = window.chat_view.message_widgets()[-1]
        prose = reply.body.widgets()[0]
        return prose.document().size().height() / prose.fontMetrics().lineSpacing()

    qtbot.waitUntil(lambda: column.width() == theme.READING_WIDTH, timeout=2000)
    before = lines()
    bigger = round(1.5 * theme.system_point_size())
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": bigger, "default_model": ""})
        window.apply_app_settings()
        wide = theme.reading_width(column.font())
        assert wide > theme.READING_WIDTH * 1.4  # seen on X: 760 px at any size, half the words at 20 pt
        qtbot.waitUntil(lambda: column.width() == wide and composer.width() == wide, timeout=2000)
        qtbot.waitUntil(lambda: abs(lines() - before) <= 0.15 * before, timeout=2000)
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)
        window.keys.sidebar_action.trigger()


def test_generating_chat_is_marked_and_other_chats_show_no_stop(qtbot, window, store, engine):
    engine.reply = "ok"
    send(qtbot, window, "first chat")
    first = window.chat.conv_id
    engine.reply = "slow " * 200
    engine.token_delay = 0.02
    window.new_action.trigger()
    send(qtbot, window, "second chat", wait=False)
    qtbot.waitUntil(lambda: window.chat.gen is not None and bool(window.chat.gen.text), timeout=5000)
    busy = window.chat.gen.conv_id
    assert window.sidebar.generating_id == busy and window.composer.stop_button.isVisible()
    window.chat.open_conversation(first)
    assert not window.composer.stop_button.isVisible()
    assert not window.composer.send_button.isEnabled()
    assert "Another chat" in window.composer.reason_label.text()
    last = window.chat_view.message_widgets()[-1]
    assert not last.regen_button.isHidden() and not last.regen_button.isEnabled()
    window.chat.open_conversation(busy)
    assert window.composer.stop_button.isVisible()
    window.escape()
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)
    assert window.sidebar.generating_id is None and not window.composer.stop_button.isVisible()


def test_error_banner_clears_on_success_or_timeout(qtbot, window, engine, monkeypatch):
    window.show_error("Export failed: disk full")
    assert window.notices.bar("error") is not None
    send(qtbot, window, "this works")
    assert window.notices.bar("error") is None
    import app.gui.window as window_module

    monkeypatch.setattr(window_module, "ERROR_BANNER_MS", 50)
    window.show_error("Something else failed")
    qtbot.waitUntil(lambda: window.notices.bar("error") is None, timeout=2000)


def test_long_message_show_more_and_less(qtbot, window, engine):
    from app.gui.chat.message_widget import USER_DISPLAY_LIMIT

    text = "line of text\n" * (USER_DISPLAY_LIMIT // 10)
    send(qtbot, window, text)
    widget = window.chat_view.message_widgets()[0]
    assert widget.more_button.isVisible() and len(widget.body.toPlainText()) <= USER_DISPLAY_LIMIT + 1
    widget.more_button.click()
    assert widget.body.toPlainText().strip() == text.strip() and widget.more_button.text() == "Show less"
    widget.more_button.click()
    assert len(widget.body.toPlainText()) <= USER_DISPLAY_LIMIT + 1


def test_message_actions_are_icon_buttons_with_tooltips(qtbot, window, engine):
    send(qtbot, window, "hi")
    user, reply = window.chat_view.message_widgets()
    for button, tip in (
        (user.copy_button, "Copy this message"),
        (user.edit_button, "Edit and resend"),
        (reply.regen_button, "Write this reply again"),
    ):
        assert button.toolTip().startswith(tip) and not button.icon().isNull() and button.accessibleName()


def test_blockquotes_and_lists_are_styled(qtbot, window, engine):
    from PySide6.QtGui import QPalette, QTextFormat

    engine.reply = "Intro\n\n> A quoted line\n\n- one\n- two\n"
    send(qtbot, window, "quote please")
    views = [w for w in window.chat_view.message_widgets()[-1].body.widgets() if hasattr(w, "document")]
    blocks = [b for view in views for b in _blocks(view.document())]
    quote = next(b for b in blocks if b.text() == "A quoted line")
    fmt = quote.blockFormat()
    assert fmt.property(QTextFormat.Property.BlockQuoteLevel) == 1 and fmt.leftMargin() >= 14
    assert fmt.background().color() == views[0].palette().color(QPalette.ColorRole.AlternateBase)
    items = [b for b in blocks if b.textList() is not None]
    assert [b.text() for b in items] == ["one", "two"] and all(b.blockFormat().bottomMargin() > 0 for b in items)


def _blocks(doc):
    block = doc.begin()
    while block.isValid():
        yield block
        block = block.next()


class _SlowListing(FakeEngine):
    async def list_models(self):
        import asyncio

        await asyncio.sleep(0.3)  # the registry scan before the start-up load
        return list(self.models)


def test_before_the_startup_load_begins_messages_still_queue(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = _SlowListing()
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine("fake-small")
    qtbot.waitUntil(lambda: w.bridge.state == "idle", timeout=3000)  # started, models not listed yet
    assert w.composer.can_queue() and "No model" not in w.composer.reason_label.text()
    assert w.status.state_label.text().startswith("Loading ")  # not "No model"
    w.composer.set_text("early bird")
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    assert w.chat.queue
    qtbot.waitUntil(task.done, timeout=5000)
    qtbot.waitUntil(lambda: len(w.chat_view.message_widgets()) == 2 and w.chat.gen is None, timeout=5000)
    assert engine.calls[0][1][-1]["content"] == "early bird"
    w.close()
    run(qtbot, w.shutdown())


def test_a_queued_message_is_not_left_waiting_when_no_model_loads(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    engine.load_delay = 0.2
    engine.fail_load["fake-small"] = "weights are corrupt"
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine("fake-small")
    w.composer.set_text("anyone there?")
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    (message,) = w.chat_view.message_widgets()
    assert "Queued" in message.stats_label.text()
    qtbot.waitUntil(task.done, timeout=5000)
    # The queue hears of the failed load in the task's done callback, which the loop runs after the task is done.
    qtbot.waitUntil(lambda: any("was not sent" in t for t in w.notices.texts()), timeout=5000)
    assert not w.chat.queue and "Queued" not in message.stats_label.text()
    # Once a model is there, Regenerate (Ctrl+R) sends it.
    run(qtbot, w.bridge.load_model("fake-big"))
    w.regen_action.trigger()
    qtbot.waitUntil(lambda: len(w.chat_view.message_widgets()) == 2 and w.chat.gen is None, timeout=5000)
    assert engine.calls[-1][1][-1]["content"] == "anyone there?"
    w.close()
    run(qtbot, w.shutdown())


def test_a_start_up_load_that_fails_no_longer_says_loading_in_the_status_bar(qtbot, qloop, store):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    engine.fail_load["fake-small"] = "it does not fit in memory"
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine("fake-small")
    qtbot.waitUntil(task.done, timeout=5000)
    qtbot.waitUntil(lambda: "Loading" not in w.status.state_label.text(), timeout=5000)
    assert w.composer.reason_label.text().startswith("No model is loaded (it does not fit in memory)")
    w.close()
    run(qtbot, w.shutdown())


def test_a_model_that_does_not_fit_is_explained_with_the_windows_settings(qtbot, qloop, store):
    from app.gui.window import MainWindow
    from engine import DoesNotFitError

    engine = FakeEngine()
    engine.fail_load["fake-small"] = DoesNotFitError("Fake does not fit in memory: it needs 9.0 GB", False)
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine("fake-small")
    qtbot.waitUntil(task.done, timeout=5000)
    (banner,) = [t for t in w.notices.texts() if "does not fit" in t]
    assert "a KV cache of 8 or 4 bits (Preferences › KV cache)" in banner
    assert "a higher memory limit (Preferences › Memory limit)" in banner and "--" not in banner
    w.close()
    run(qtbot, w.shutdown())


def test_snippet_is_shown_from_just_before_the_match():
    from app.gui.sidebar import _around

    text = "…the first part of a long reply that goes on and then mentions Scotland at last…"
    assert _around(text, "scotland").startswith("…") and "Scotland" in _around(text, "scotland")[:30]
    assert _around("Scotland first", "scotland") == "Scotland first"


def test_esc_right_after_enter_stops_the_reply(qtbot, window, store, engine):
    engine.reply = "word " * 300
    window.composer.set_text("a long one please")
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    window.escape()  # before the engine's turn has even begun
    qtbot.waitUntil(lambda: window.chat.gen is None, timeout=5000)
    reply = store.get_conversation(window.chat.conv_id).messages[-1]
    assert reply.status == "stopped" and len(reply.content.split()) < 300


def test_empty_list_says_so_and_return_in_search_opens_the_first_result(qtbot, window, engine):
    assert window.sidebar.no_match.isVisible() and "No chats yet" in window.sidebar.no_match.text()
    send(qtbot, window, "apples")
    assert not window.sidebar.no_match.isVisible() and window.sidebar.list.isVisible()
    window.new_action.trigger()
    send(qtbot, window, "pears")
    window.sidebar.focus_search()
    QTest.keyClicks(window.sidebar.search, "apples")
    qtbot.waitUntil(lambda: window.sidebar.titles() == ["apples"], timeout=2000)
    QTest.keyClick(window.sidebar.search, Qt.Key.Key_Return)
    assert window.chat_view.message_widgets()[0].text() == "apples"
    assert window.focusWidget() is window.composer.editor


def test_the_model_picker_sits_in_the_chat_header(window):
    assert window.header.isAncestorOf(window.model_picker)
