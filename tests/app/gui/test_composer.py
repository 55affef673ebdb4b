"""The message box at a big font size in a small window: its placeholder is never cut."""

import sys

import pytest
from PySide6.QtCore import QRect, Qt

pytestmark = pytest.mark.qt


def placeholder_room(editor) -> int:
    """The viewport's height beyond what the wrapped placeholder needs (negative: it is cut)."""
    margin = int(editor.document().documentMargin())  # where QPlainTextEdit draws it: left and top
    width = editor.viewport().width() - margin
    flags = Qt.TextFlag.TextWordWrap
    needed = editor.fontMetrics().boundingRect(QRect(0, 0, width, 10_000), flags, editor.placeholderText()).height()
    return editor.viewport().height() - margin - needed


def test_the_placeholder_wraps_whole_at_20_pt_in_the_smallest_window(qtbot, window, store):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY
    from app.gui.window import MIN_SIZE

    editor = window.composer.editor
    window.resize(*MIN_SIZE)
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": 20, "default_model": ""})
        window.apply_app_settings()
        qtbot.waitUntil(lambda: window.width() == MIN_SIZE[0] and editor.font().pointSize() == 20)
        qtbot.waitUntil(lambda: placeholder_room(editor) >= 0)  # seen on X: its third line was cut
        assert editor.toPlainText() == ""
        assert placeholder_room(editor) < editor.fontMetrics().lineSpacing()  # and no spare line
        window.composer.set_draft("one line")  # typed text: two lines of room, as before
        qtbot.waitUntil(lambda: editor.height() < 4 * editor.fontMetrics().lineSpacing())
        window.composer.set_draft("")  # no draft left to read ahead once the test's event loop is gone
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)


@pytest.mark.skipif(sys.platform == "darwin", reason="Option+letter types a character on macOS")
def test_alt_and_a_letter_types_nothing_in_the_message_box(qtbot, qloop, window):  # typing reads ahead
    from PySide6.QtTest import QTest

    editor = window.composer.editor
    editor.setFocus()
    QTest.keyClicks(editor, "hello")
    QTest.keyClick(editor, Qt.Key.Key_O, Qt.KeyboardModifier.AltModifier)
    QTest.keyClick(editor, Qt.Key.Key_Q, Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.ShiftModifier)
    assert editor.toPlainText() == "hello"
    with qtbot.waitSignal(window.bridge.draftPrefilled, timeout=5000):  # the pause reads the draft ahead
        QTest.keyClicks(editor, " ø")  # a character of its own (AltGr on X11) is typed
    assert editor.toPlainText() == "hello ø"


def test_attach_opens_in_documents_then_in_the_folder_last_attached_from(qtbot, window, tmp_path, monkeypatch):
    from pathlib import Path

    home = tmp_path / "home"
    (home / "Documents" / "reports").mkdir(parents=True)
    report = home / "Documents" / "reports" / "q3.txt"
    report.write_text("Sales rose.")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOCUMENTS_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))  # no user-dirs.dirs: Documents is ~/Documents
    dialog = window.composer.choose_files()
    try:  # seen on X: it opened in the home folder, beside Documents
        assert Path(dialog.directory().absolutePath()) == home / "Documents"
        dialog.filesSelected.emit([str(report)])
    finally:
        dialog.reject()
    dialog = window.composer.choose_files()
    try:
        assert Path(dialog.directory().absolutePath()) == report.parent
    finally:
        dialog.reject()


def test_file_attach_file_opens_the_attach_dialog_with_its_shortcut(qtbot, window, tmp_path):
    from PySide6.QtGui import QKeySequence
    from PySide6.QtWidgets import QFileDialog

    from app.gui import shortcuts

    action = window.attach_action
    assert action.text() == "Attach File…" and action in window.menuBar().actions()[0].menu().actions()
    assert action.shortcut() == QKeySequence(shortcuts.ATTACH)
    clashes = [
        a.text() for a in window.findChildren(type(action)) if a is not action and a.shortcut() == action.shortcut()
    ]
    assert clashes == []
    assert shortcuts.key_text(shortcuts.ATTACH) in window.composer.attach_button.toolTip()
    assert ("Attach files to the message", shortcuts.ATTACH) in shortcuts.SHEET
    action.trigger()
    dialogs = [d for d in window.findChildren(QFileDialog) if d.isVisible()]
    try:
        assert [d.windowTitle() for d in dialogs] == ["Attach Files"]
        report = tmp_path / "notes.txt"
        report.write_text("Sales rose.")
        dialogs[0].filesSelected.emit([str(report)])
        qtbot.waitUntil(lambda: window.composer.attachments.isVisible(), timeout=3000)
    finally:
        for d in dialogs:
            d.reject()
