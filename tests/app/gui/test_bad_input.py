"""Bad and unusual input: huge pastes, scripts and emoji, broken markdown, read-only data,
unwritable export paths, engine failures."""

import sqlite3
import time

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics, QGuiApplication
from PySide6.QtTest import QTest

from engine.errors import ContextOverflowError
from tests.app_helpers import FakeEngine, run

pytestmark = pytest.mark.qt


def make_window(qtbot, store, engine):
    from app.gui.window import MainWindow

    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    run(qtbot, w.start_engine("fake-small"))
    return w


@pytest.fixture
def window(qtbot, qloop, store):
    w = make_window(qtbot, store, FakeEngine(reply="fine"))
    yield w
    w.close()
    run(qtbot, w.shutdown())


def send(qtbot, w, text):
    w.composer.set_text(text)
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: w.chat.gen is None and not w.bridge.is_generating(), timeout=20_000)


@pytest.mark.timing
def test_one_megabyte_paste(qtbot, window, store):
    from app.gui.chat.message_widget import USER_DISPLAY_LIMIT

    big = ("All work and no play makes Jack a dull boy. " * 24_000)[:1_000_000]
    QGuiApplication.clipboard().setText(big)
    window.composer.editor.setFocus()
    window.composer.editor.paste()
    assert window.composer.text() == big
    start = time.monotonic()
    QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.chat.gen is None and not window.bridge.is_generating(), timeout=20_000)
    assert time.monotonic() - start < 10
    msgs = store.get_conversation(window.chat.conv_id).messages
    assert msgs[0].content == big and msgs[1].content == "fine"
    assert window.bridge.engine.calls[-1][1][-1]["content"] == big
    widget = window.chat_view.message_widgets()[0]
    assert widget.text() == big
    shown = widget.body.toPlainText()
    assert len(shown) < USER_DISPLAY_LIMIT + 200
    assert widget.more_button.isVisible() and "more characters" in widget.more_button.text()
    widget.copy_button.click()
    assert QGuiApplication.clipboard().text() == big
    assert len(window.sidebar.titles()[0]) <= 60


def test_emoji_right_to_left_and_mixed_scripts(qtbot, window, store):
    text = "שלום עולם 👋🏽 مرحبا بالعالم — 你好, Привет, नमस्ते 👨‍👩‍👧 e\u0301"
    window.bridge.engine.reply = "עברית ו-English 🎉 in one reply"
    send(qtbot, window, text)
    msgs = store.get_conversation(window.chat.conv_id).messages
    assert msgs[0].content == text and msgs[1].content == "עברית ו-English 🎉 in one reply"
    user, reply = window.chat_view.message_widgets()
    assert user.text() == text and user.body.toPlainText() == text
    assert window.sidebar.titles() == [text]
    # Right-to-left paragraphs are laid out right to left.
    block = user.body.document().firstBlock()
    assert (
        block.layout().textOption().textDirection() == Qt.LayoutDirection.RightToLeft
        or block.textDirection() == Qt.LayoutDirection.RightToLeft
    )
    assert "🎉" in reply.body.widgets()[0].toPlainText()


def test_unclosed_code_fence_renders_as_code(qtbot, window, store):
    from app.gui.chat.markdown_view import CodeBlock

    window.bridge.engine.reply = "Here it is:\n\n```python\ndef f(x):\n    return x  # never closed"
    send(qtbot, window, "```\nan unclosed fence in my own message")
    reply = window.chat_view.message_widgets()[-1]
    code = [w for w in reply.body.widgets() if isinstance(w, CodeBlock)]
    assert len(code) == 1 and code[0].text() == "def f(x):\n    return x  # never closed"
    # What the reader sees: every character as wide as every other. Not QFontInfo.fixedPitch(),
    # which is False for some monospace fonts (Noto Sans Mono) and would tie the test to the machine.
    metrics = QFontMetrics(code[0].editor.font())
    assert len({metrics.horizontalAdvance(c) for c in "iW.m0 _"}) == 1
    user = window.chat_view.message_widgets()[0]
    assert user.text().startswith("```")
    assert store.get_conversation(window.chat.conv_id).messages[-1].status == "complete"


def test_whitespace_only_is_not_sent(qtbot, window, store):
    for text in ("", " ", "\n\n", "\t \u00a0\u2003 "):
        window.composer.set_text(text)
        QTest.keyClick(window.composer.editor, Qt.Key.Key_Return)
        window.composer.send_button.click()
    assert window.chat.conv_id is None and store.list_conversations() == []
    assert window.bridge.engine.calls == []


def test_newer_database_opens_read_only_with_notice(qtbot, qloop):
    from app.core.store import Store

    s = Store()
    conv = s.create_conversation()
    s.add_message(conv.id, "user", "written by the future")
    s.add_message(conv.id, "assistant", "indeed")
    s.set_state("last_conversation", conv.id)
    path = s.path
    s.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    store = Store()
    assert store.read_only and store.notice
    w = make_window(qtbot, store, FakeEngine())
    assert any("newer version" in t for t in w.notices.texts())
    assert not w.composer.is_ready() and "read-only" in w.composer.reason_label.text()
    assert [m.text() for m in w.chat_view.message_widgets()] == ["written by the future", "indeed"]
    w.chat.delete(conv.id)
    assert w.sidebar.ids() == [conv.id]
    assert "read-only" in " ".join(w.notices.texts())
    w.close()
    run(qtbot, w.shutdown())
    store.close()


def test_unwritable_export_path_shows_an_error(qtbot, window, tmp_path):
    send(qtbot, window, "export me")
    for target in (tmp_path / "no-such-folder" / "chat.md", tmp_path, "/proc/chinwag-export.md"):
        assert not window.dialogs.export_to(str(target), "md")
        error = window.notices.bar("error").text()
        assert error.startswith("Export failed:") and "\n" not in error
    assert not window.dialogs.export_to(str(tmp_path / "chat.xyz"), "xyz")
    assert "xyz" in window.notices.bar("error").text()


def test_engine_failure_marks_the_reply_failed(qtbot, qloop, store):
    class Overflowing(FakeEngine):
        async def _chat(self, conv_id, messages, params, stop):
            raise ContextOverflowError("the prompt needs 9000 tokens but the context holds 2048")
            yield  # an async generator

    w = make_window(qtbot, store, Overflowing())
    send(qtbot, w, "too long")
    msgs = store.get_conversation(w.chat.conv_id).messages
    assert [(m.role, m.status) for m in msgs] == [("user", "complete"), ("assistant", "failed")]
    assert "9000 tokens" in w.chat_view.message_widgets()[-1].stats_label.text()
    assert "9000 tokens" in w.notices.bar("error").text()
    assert w.composer.is_ready() and not w.composer.stop_button.isVisible()
    # The failed reply is not sent back to the engine next time.
    w.bridge._engine = FakeEngine(reply="ok")
    w.bridge._engine.current_model = Overflowing().models[0]
    send(qtbot, w, "shorter")
    assert [m["content"] for m in w.bridge.engine.calls[-1][1]] == ["too long", "shorter"]
    w.close()
    run(qtbot, w.shutdown())
