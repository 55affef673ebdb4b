"""Chat Settings and Preferences: keys in the dialogs, tooltips, app settings that apply."""

import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialog

from tests.app_helpers import FakeEngine, run, send

pytestmark = pytest.mark.qt


def test_tab_leaves_the_system_prompt_and_return_is_ok(qtbot, window, store, engine):
    send(qtbot, window, "hi")
    dialog = window.dialogs.chat_settings_dialog()
    dialog.system_prompt.setFocus()
    QTest.keyClicks(dialog.system_prompt, "Be brief.")
    QTest.keyClick(dialog.system_prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClicks(dialog.system_prompt, "Really.")
    QTest.keyClick(dialog.system_prompt, Qt.Key.Key_Tab)
    assert dialog.system_prompt.toPlainText() == "Be brief.\nReally."
    assert dialog.focusWidget() is not dialog.system_prompt
    dialog.system_prompt.setFocus()
    QTest.keyClick(dialog.system_prompt, Qt.Key.Key_Return)
    assert dialog.result() == dialog.DialogCode.Accepted
    assert store.get_conversation(window.chat.conv_id).settings["system_prompt"] == "Be brief.\nReally."


@pytest.mark.skipif(sys.platform == "darwin", reason="Option+letter types a character on macOS")
def test_alt_o_is_ok_and_types_no_o_into_the_prompt(qtbot, window, store, engine):
    send(qtbot, window, "hi")
    dialog = window.dialogs.chat_settings_dialog()
    dialog.open()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)  # a button's Alt+letter works in the active window
    dialog.system_prompt.setFocus()
    QTest.keyClicks(dialog.system_prompt, "Be brief")
    QTest.keyClick(dialog.system_prompt, Qt.Key.Key_X, Qt.KeyboardModifier.AltModifier)  # no mnemonic: nothing
    assert dialog.system_prompt.toPlainText() == "Be brief" and dialog.isVisible()
    with qtbot.waitSignal(dialog.finished) as finished:  # the dialog deletes itself once closed
        QTest.keyClick(dialog.system_prompt, Qt.Key.Key_O, Qt.KeyboardModifier.AltModifier)  # seen on X: "Be briefo"
    assert finished.args == [QDialog.DialogCode.Accepted.value]
    assert store.get_conversation(window.chat.conv_id).settings["system_prompt"] == "Be brief"


def test_return_in_a_number_field_is_ok_too(qtbot, window, store, engine):
    dialog = window.dialogs.preferences_dialog()
    box = dialog.fields["temperature"]
    box.setFocus()
    box.selectAll()
    QTest.keyClicks(box, "0.3")
    QTest.keyClick(box, Qt.Key.Key_Return)
    assert dialog.result() == dialog.DialogCode.Accepted
    assert store.get_state("default_settings")["temperature"] == pytest.approx(0.3)


def test_every_sampling_knob_explains_itself(qtbot, window):
    dialog = window.dialogs.chat_settings_dialog()
    for key in dialog.fields:  # every numeric knob
        assert len(dialog.fields[key].toolTip()) > 30, key
    assert set(dialog.fields) >= {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens"}
    assert "Enter" in dialog.system_prompt.toolTip()
    dialog.reject()


def test_presets_fill_the_system_prompt(qtbot, window):
    dialog = window.dialogs.preferences_dialog()
    names = [dialog.preset_box.itemText(i) for i in range(dialog.preset_box.count())]
    assert "Concise" in names
    dialog.preset_box.activated.emit(names.index("Concise"))
    assert dialog.system_prompt.toPlainText().startswith("Answer in as few words")
    dialog.reject()


def test_preferences_theme_font_and_default_model(qtbot, qloop, window, store, engine):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY, load_app_settings

    app = QApplication.instance()
    assert load_app_settings(store) == {
        "theme": "system",
        "font_size": 0,
        "default_model": "",
        "memory_limit": "",
        "kv_cache": {},
    }
    send(qtbot, window, "hi")
    before = window.chat_view.message_widgets()[0]
    try:
        dialog = window.dialogs.preferences_dialog()
        dialog.theme_box.setCurrentIndex(dialog.theme_box.findData("dark"))
        dialog.font_box.setValue(15)
        dialog.model_box.setCurrentIndex(dialog.model_box.findData("fake-big"))
        dialog.accept()
        saved = store.get_state(APP_KEY)
        assert saved == {
            "theme": "dark",
            "font_size": 15,
            "default_model": "fake-big",
            "memory_limit": "",
            "kv_cache": {},
        }
        assert theme.is_dark(app.palette()) and app.font().pointSize() == 15
        # The open chat is rendered again, in the new colours and size.
        shown = window.chat_view.message_widgets()
        assert shown[0] is not before and shown[0].text() == "hi"
        # The default model is what the next start loads (over the last used one).
        from app.gui.window import MainWindow

        w2 = MainWindow(store, FakeEngine())
        qtbot.addWidget(w2)
        run(qtbot, w2.start_engine())
        assert w2.bridge.current_model.id == "fake-big"
        w2.close()
        run(qtbot, w2.shutdown())
        dialog = window.dialogs.preferences_dialog()
        dialog.theme_box.setCurrentIndex(dialog.theme_box.findData("light"))
        dialog.accept()
        assert not theme.is_dark(app.palette())
        assert app.palette().color(QPalette.ColorRole.Base).name() == "#ffffff"
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)


def test_bad_app_settings_fall_back_to_defaults(store):
    from app.gui.settings.preferences import APP_DEFAULTS, APP_KEY, load_app_settings

    store.set_state(APP_KEY, {"theme": "neon", "font_size": "huge", "default_model": "m1"})
    values = load_app_settings(store)
    assert values["theme"] == APP_DEFAULTS["theme"] and values["font_size"] == 0
    assert values["default_model"] == "m1"


def test_the_font_size_scales_every_text_in_the_chat(qtbot, qloop, window, store, engine):
    from PySide6.QtGui import QFontInfo

    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY

    engine.reply = "Prose first.\n\n```python\ndef is_prime(n):\n    return n > 1\n```\n"
    send(qtbot, window, "hi")

    def sizes():
        reply = window.chat_view.message_widgets()[-1]
        prose, code = reply.body.widgets()
        return {
            "prose": QFontInfo(prose.document().defaultFont()).pointSizeF(),
            "code": QFontInfo(code.editor.font()).pointSizeF(),
            "code language": QFontInfo(code.lang_label.font()).pointSizeF(),
            "author": QFontInfo(reply.who_label.font()).pointSizeF(),
            "stats": QFontInfo(reply.stats_label.font()).pointSizeF(),
            "welcome": QFontInfo(window.chat_view.welcome.heading.font()).pointSizeF(),
        }

    try:
        looks = {}
        for size in (8, 14):
            store.set_state(APP_KEY, {"theme": "system", "font_size": size, "default_model": ""})
            window.apply_app_settings()
            looks[size] = sizes()
            editor = window.composer.editor  # the message box keeps room for two lines of the new size
            window.composer.set_draft("line one\nline two")
            qtbot.waitUntil(
                lambda editor=editor: (
                    editor.viewport().height() >= 2 * editor.fontMetrics().lineSpacing()
                    and not editor.verticalScrollBar().isVisible()
                )
            )
            window.composer.set_draft("")
        for text in looks[8]:
            assert looks[14][text] > looks[8][text], text  # every text follows the preference
        for size in (8, 14):  # code reads at the prose's size, not the system's fixed font size
            assert looks[size]["code"] == pytest.approx(looks[size]["prose"], rel=0.15)
        assert looks[14]["welcome"] > looks[14]["prose"]
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)


def test_the_first_step_from_system_size_goes_to_the_neighbouring_size(qtbot, window):
    from PySide6.QtWidgets import QApplication

    dialog = window.dialogs.preferences_dialog()
    box = dialog.font_box
    system = QApplication.font().pointSize()
    assert box.value() == box.minimum() and box.text() == "System size"
    box.stepUp()
    assert box.value() == system + 1  # bigger than the system's size, never the range's smallest
    box.setValue(box.minimum())
    box.stepDown()
    assert box.value() == system - 1
    box.setValue(box.minimum())
    QTest.keyClick(box, Qt.Key.Key_Up)
    assert box.value() == system + 1
    dialog.reject()


@pytest.mark.parametrize("which", ["preferences_dialog", "chat_settings_dialog"])
def test_at_20_pt_the_settings_dialogs_fit_the_screen(qtbot, window, store, which):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY

    send(qtbot, window, "hi")  # a chat for Chat Settings
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": 20, "default_model": ""})
        window.apply_app_settings()
        dialog = getattr(window.dialogs, which)()
        qtbot.waitUntil(dialog.isVisible)
        room = dialog.screen().availableGeometry().height()
        assert dialog.height() < room  # seen on X at 14 pt: OK and Cancel below the screen's edge
        ok = dialog.ok_button
        assert ok.isVisible() and ok.mapTo(dialog, ok.rect().bottomLeft()).y() <= dialog.height()
        rows = dialog.rows_scroll.widget()
        assert rows.width() >= rows.minimumSizeHint().width()  # seen on X: the fields ran under the scroll bar
        if rows.minimumSizeHint().height() > dialog.rows_scroll.viewport().height():  # the rows scroll instead
            qtbot.waitUntil(lambda: dialog.rows_scroll.verticalScrollBar().maximum() > 0)
        dialog.reject()
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)


@pytest.mark.parametrize("which", ["preferences_dialog", "chat_settings_dialog"])
def test_a_settings_dialog_opens_in_its_first_row_and_tab_goes_down_the_rows(qtbot, window, which):
    dialog = getattr(window.dialogs, which)()
    dialog.open()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow)
    seen = []
    for _ in range(7):
        seen.append(dialog.focusWidget().objectName())
        QTest.keyClick(dialog.focusWidget(), Qt.Key.Key_Tab)
    chat_rows = ["promptPreset", "systemPrompt", "temperature", "top_p", "top_k"]
    # seen on X: the keyboard was on the frame around the rows, and Tab skipped Theme and Font size
    # the KV group size is skipped while the cache is at full precision (it is disabled)
    if which == "preferences_dialog":
        assert seen == ["theme", "fontSize", "defaultModel", "memoryLimit", "kvBits", "openServer", chat_rows[0]]
    else:
        assert seen == [*chat_rows, "min_p", "repetition_penalty"]
    dialog.reject()


def test_the_message_buttons_grow_with_the_font_size(qtbot, window, store, engine):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY

    send(qtbot, window, "hi")

    def buttons():
        reply = window.chat_view.message_widgets()[-1]
        return [reply.copy_button, window.composer.attach_button]

    assert all(b.iconSize().width() == 16 for b in buttons())
    bigger = round(1.5 * theme.system_point_size())
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": bigger, "default_model": ""})
        window.apply_app_settings()
        want = round(16 * bigger / theme.system_point_size())
        qtbot.waitUntil(lambda: all(b.iconSize().width() == want for b in buttons()), timeout=3000)
        for b in buttons():  # drawn at that size, not a 16 px drawing blown up
            assert b.icon().availableSizes()[0].width() >= want
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)
