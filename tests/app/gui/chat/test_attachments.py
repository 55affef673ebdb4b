"""Documents in the window (fake engine): paste or drop a file, a chip with its size and the context share,
the draft read ahead with the document's block, the message saved with it, errors on the chip."""

import re

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QLabel, QPlainTextEdit

from app.core.document_block import message_content
from tests.app.documents.files import BAD_INPUTS, make_bad, png_bytes, write_pdf
from tests.app_helpers import send

pytestmark = pytest.mark.qt


def _files(paths) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def attach_too_big(qtbot, window, tmp_path):
    """A real 8-page PDF too big for a 600-token context, attached and ready: the tray."""
    from engine.types import GenerationParams

    pages = [f"Page {n} is about topic{n} and nothing else. " * 12 for n in range(1, 9)]
    tray = window.composer.attachments
    tray.params = lambda: GenerationParams(context_cap=600)
    tray.add_paths([str(write_pdf(tmp_path / "big.pdf", pages))])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    return tray


def test_paste_a_pdf_then_ask(qtbot, window, store, engine, tmp_path):
    pdf = write_pdf(tmp_path / "report.pdf", ["Apples are red.", "Pears are green."])
    window.composer.editor.insertFromMimeData(_files([pdf]))
    tray = window.composer.attachments
    assert window.composer.text() == ""  # a file, not its path as text
    qtbot.waitUntil(lambda: bool(tray.ready_documents()) and "% of the context" in tray.summary.text(), timeout=10_000)
    chip = tray._chips[0]
    assert chip.name.text() == "report.pdf" and " tokens" in chip.status.text()
    assert chip.kind.text() == "PDF" and not chip.kind.isHidden()  # the type, from the content
    assert tray.summary.text().startswith("report.pdf ")
    # Read at attach: the draft (the document's block alone) goes to the engine at once.
    qtbot.waitUntil(lambda: bool(engine.prefills), timeout=5000)
    text = tray.ready_documents()[0].extracted.text
    assert engine.prefills[-1][1][-1]["content"].startswith('<document name="report.pdf">\n[page 1]')
    send(qtbot, window, "What colour are pears?")
    sent = engine.calls[-1][1][-1]["content"]
    assert sent.startswith(engine.prefills[-1][1][-1]["content"])  # the read-ahead is a prefix of what is sent
    assert "Pears are green." in sent and sent.endswith("What colour are pears?")
    assert not tray.isVisible() and not tray.ready_documents()
    conv = store.get_conversation(window.chat.conv_id)
    assert conv.messages[0].content == "What colour are pears?"
    assert [a.name for a in conv.messages[0].attachments] == ["report.pdf"]
    assert conv.messages[0].attachments[0].text == text
    assert sent == message_content("What colour are pears?", [conv.messages[0].attachments[0].for_message()])
    widget = window.chat_view.message_widgets()[0]
    from app.gui.chat.sent_attachments import MessageAttachments

    shown = widget.findChild(MessageAttachments)
    assert shown is not None and shown.buttons[0].text().endswith("report.pdf")
    dialog = shown.show_text(conv.messages[0].attachments[0])
    assert "Pears are green." in dialog.findChild(type(window.composer.editor).__mro__[1]).toPlainText()
    dialog.close()
    # Reopened, the chat shows its documents again.
    window.chat.new_conversation()
    window.chat.open_conversation(conv.id)
    reopened = window.chat_view.message_widgets()[0].findChild(MessageAttachments)
    assert reopened is not None and reopened.buttons[0].text() == "report.pdf"


def test_drop_on_the_window_and_errors_on_the_chip(qtbot, window, engine, tmp_path):
    (tmp_path / "photo.png").write_bytes(png_bytes())
    mime = _files([tmp_path / "photo.png"])
    buttons, keys = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys)
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(window, QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, buttons, keys))
    tray = window.composer.attachments
    qtbot.waitUntil(lambda: bool(tray._chips and tray._chips[0].doc.error), timeout=10_000)
    assert tray._chips[0].status.text() == "photo.png is an image: Chinwag reads text, PDF and DOCX"
    assert not tray.ready_documents()
    tray._chips[0].remove_button.click()
    qtbot.waitUntil(lambda: not tray.isVisible(), timeout=5000)
    # A file deleted after it was read: the text was already extracted, so it is still sent.
    pdf = write_pdf(tmp_path / "gone.pdf", ["Short lived."])
    tray.add_paths([str(pdf)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    pdf.unlink()
    send(qtbot, window, "Still there?")
    assert "Short lived." in engine.calls[-1][1][-1]["content"]


def test_sending_waits_for_a_document_being_read(qtbot, window, engine, tmp_path):
    pdf = write_pdf(tmp_path / "r.pdf", ["x"])
    tray = window.composer.attachments
    tray.add_paths([str(pdf)])
    window.composer.set_text("Question")
    assert tray.busy() and not window.composer.send_button.isEnabled()
    qtbot.waitUntil(lambda: not tray.busy(), timeout=10_000)
    assert window.composer.send_button.isEnabled()
    send(qtbot, window, "Question")  # sent: no draft timer is left running past the test


def test_too_big_for_the_context_sends_passages(qtbot, window, store, engine, tmp_path):
    tray = attach_too_big(qtbot, window, tmp_path)
    doc = tray.ready_documents()[0]
    assert doc.too_big and doc.index is not None
    assert "too big for the context" in tray._chips[0].status.text()
    assert not engine.prefills or "big.pdf" not in engine.prefills[-1][1][-1]["content"]  # nothing to read ahead
    send(qtbot, window, "Tell me about topic7")
    sent = engine.calls[-1][1][-1]["content"]
    assert 'excerpts="passages related to the question"' in sent and "topic7" in sent and "topic2 " not in sent
    stored = store.get_conversation(window.chat.conv_id).messages[0].attachments[0]
    assert stored.passages and stored.text == doc.extracted.text  # the whole text is kept, the passages sent
    send(qtbot, window, "And what about topic3?")  # a follow-up picks its own passages
    follow = engine.calls[-1][1][-1]["content"]
    assert 'excerpts="passages related to the question"' in follow and "topic3" in follow
    assert engine.calls[-1][1][0]["content"] == sent  # the earlier message is sent exactly as before


def test_a_follow_up_sends_only_the_passages_no_earlier_message_holds(qtbot, window, store, engine, tmp_path):
    """Issue 35: every follow-up carried a full budget again, repeating pages already in the chat."""
    from app.documents.retrieval import references
    from engine.types import GenerationParams

    pages = [f"Page {n} is about topic{n} and nothing else. " * 12 for n in range(1, 25)]
    tray = window.composer.attachments
    tray.params = lambda: GenerationParams(context_cap=1600, max_tokens=64)
    tray.add_paths([str(write_pdf(tmp_path / "big.pdf", pages))])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    assert tray.ready_documents()[0].too_big
    send(qtbot, window, "topic7 and topic9?")
    first = engine.calls[-1][1][-1]["content"]
    assert "Page 7 is about" in first and "Page 9 is about" in first
    send(qtbot, window, "And topic7 next to topic13?")
    follow = engine.calls[-1][1][-1]["content"]
    assert "Page 13 is about" in follow and "Page 7 is about" not in follow  # page 7 is in the first message
    assert engine.calls[-1][1][0]["content"] == first  # which is sent with it, as before
    assert len(follow) < len(first)  # not a full budget again
    messages = store.get_conversation(window.chat.conv_id).messages
    assert references(messages[-2].attachments[0].passages) == ["page 13"]
    shown = window.chat_view.message_widgets()[-1].findChild(QLabel, "passagesUsed")
    assert shown is not None and shown.text() == "Passages used: big.pdf: page 13"


def test_reading_into_the_cache_shows_on_the_chip_and_in_the_status_bar(qtbot, window, engine, tmp_path):
    pdf = write_pdf(tmp_path / "report.pdf", ["Apples are red."])
    tray = window.composer.attachments
    tray.add_paths([str(pdf)])
    # The fake engine reports 0, half and all of the draft read: the chip ends "read".
    qtbot.waitUntil(lambda: tray._chips[0].status.text().endswith(" tokens · read"), timeout=10_000)
    assert window.statusBar().currentMessage() == "Read report.pdf: asking computes only your question"
    from engine.types import BackgroundPrefill, PrefillProgress

    # The engine's progress while a long document is read: 43 of its 100 ids held.
    window.bridge.readingAhead.emit("c", PrefillProgress(3, 60, 100))
    assert tray._chips[0].status.text() == "Reading report.pdf… 43%"
    assert window.status.state_label.text() == "Reading report.pdf… 43%"  # one steady line, not a message
    window.bridge.draftPrefilled.emit("c", BackgroundPrefill(100, 0, 43, False, "preempted"))
    assert tray._chips[0].status.text() == "Reading report.pdf… 43%"  # newer work goes on reading it
    window.bridge.draftPrefilled.emit("c", BackgroundPrefill(0, 0, 0, False, "the engine is busy"))
    assert tray._chips[0].status.text().endswith(" tokens")  # not read: no progress left hanging
    send(qtbot, window, "What colour?")


def test_a_sent_document_shows_its_text_and_offers_the_original_and_a_copy(
    qtbot, window, store, engine, tmp_path, monkeypatch
):
    from unittest.mock import create_autospec

    from PySide6.QtGui import QDesktopServices

    from app.gui.chat.sent_attachments import MessageAttachments

    pdf = write_pdf(tmp_path / "report.pdf", ["Pears are green."])
    tray = window.composer.attachments
    tray.add_paths([str(pdf)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    send(qtbot, window, "What colour?")
    shown = window.chat_view.message_widgets()[0].findChild(MessageAttachments)
    item = shown.items[0]
    with qtbot.waitSignal(shown.buttons[0].clicked):
        shown.buttons[0].click()  # click: the extracted text
    dialog = shown._dialogs[-1]
    assert dialog.windowTitle() == "report.pdf" and "Pears are green." in dialog.findChild(QPlainTextEdit).toPlainText()
    dialog.close()
    menu = shown.context_menu(item)
    actions = {a.text(): a for a in menu.actions()}
    assert set(actions) == {"Open the Original", "Copy the Text", "Show the Text"}
    actions["Copy the Text"].trigger()
    assert QApplication.clipboard().text() == item.text
    opened = []
    open_url = create_autospec(QDesktopServices.openUrl, side_effect=lambda url: opened.append(url) or True)
    monkeypatch.setattr(QDesktopServices, "openUrl", open_url)  # no desktop app in a test
    assert actions["Open the Original"].isEnabled()
    actions["Open the Original"].trigger()
    path = opened[0].toLocalFile()
    assert path.endswith("/report.pdf") and open(path, "rb").read() == pdf.read_bytes()
    import os
    import stat

    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_passages_used_are_shown_under_the_reply(qtbot, window, store, engine, tmp_path):
    tray = attach_too_big(qtbot, window, tmp_path)
    assert tray._chips[0].status.text().endswith("too big for the context: passages per question, or × to cancel")
    # The composer says what the message will take: the passages' budget, not the whole document.
    assert re.fullmatch(
        r"big\.pdf: passages, up to [\d,]+ tokens per question · \d+% of the context", tray.summary.text()
    )
    assert window.statusBar().currentMessage().startswith("big.pdf is too big for the context (")
    send(qtbot, window, "Tell me about topic7")
    send(qtbot, window, "And what about topic3?")

    def notes():
        return [w.findChild(QLabel, "passagesUsed") for w in window.chat_view.message_widgets()]

    first, second = notes()[1], notes()[3]
    assert first is not None and first.text().startswith("Passages used: big.pdf: ") and "page 7" in first.text()
    assert second is not None and "page 3" in second.text() and "page 7" not in second.text()
    assert notes()[0] is None and notes()[2] is None  # under the replies, not the questions
    conv_id = window.chat.conv_id
    window.chat.new_conversation()
    window.chat.open_conversation(conv_id)  # reopened: shown again
    assert notes()[1] is not None and notes()[1].text() == first.text()


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_every_bad_input_is_one_line_on_the_chip_and_nothing_is_half_sent(qtbot, window, store, engine, tmp_path, kind):
    path, line = make_bad(kind, tmp_path / "files")
    tray = window.composer.attachments
    tray.add_paths([path])
    qtbot.waitUntil(lambda: bool(tray._chips[0].doc.error), timeout=20_000)
    shown = tray._chips[0].status.text()
    assert re.match(line, shown) and "\n" not in shown
    assert not tray.busy() and not tray.ready_documents() and not engine.prefills
    window.composer.set_text("Hello")
    assert not window.composer.send_button.isEnabled()  # never left out silently: removed first
    assert window.composer.reason_label.text().endswith("remove it (×) to send your message without it.")
    tray._chips[0].remove_button.click()
    qtbot.waitUntil(lambda: window.composer.send_button.isEnabled(), timeout=5000)
    send(qtbot, window, "Hello")
    (message,) = [m for m in store.get_conversation(window.chat.conv_id).messages if m.role == "user"]
    assert message.content == "Hello" and message.attachments == []
    assert engine.calls[-1][1][-1]["content"] == "Hello"


def test_passages_used_names_each_page_once():
    from app.core.attachments import StoredAttachment
    from app.gui.chat.sent_attachments import passages_used

    item = StoredAttachment("a.pdf", "pdf", 1, "0" * 64, "whole", "[page 4]\nx\n\n[page 4]\ny\n\n[page 9]\nz")
    assert passages_used([item, StoredAttachment("b.txt", "text", 1, "1" * 64, "all")]) == "a.pdf: page 4, page 9"


def test_a_drop_on_a_text_field_attaches_the_file_and_the_message_box_takes_the_keyboard(qtbot, window, tmp_path):
    pdf = write_pdf(tmp_path / "report.pdf", ["Apples are red."])
    mime = _files([pdf])
    buttons, keys = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier
    search = window.sidebar.search  # a line edit would paste the file's URL as text
    search.setFocus()
    assert window.focusWidget() is search
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, buttons, keys)
    QApplication.sendEvent(search, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(search, QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, buttons, keys))
    tray = window.composer.attachments
    assert search.text() == "" and len(tray._chips) == 1
    assert window.focusWidget() is window.composer.editor  # the question is typed next
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    # Text (no file) dropped on the search field is still the field's own business.
    text = QMimeData()
    text.setText("apples")
    QApplication.sendEvent(search, QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, text, buttons, keys))
    assert len(tray._chips) == 1


def test_documents_that_fit_alone_but_not_together_and_the_reply_room(qtbot, window, store, engine, tmp_path):
    from engine.types import GenerationParams

    first = tmp_path / "first.txt"
    first.write_text("alpha words here. " * 70)  # about 210 tokens for the fake engine
    second = tmp_path / "second.txt"
    second.write_text("beta words here. " * 70)
    tray = window.composer.attachments
    # As app/documents/turn.py plans it: 360 - 64 reply - 64 template = 232 free
    tray.params = lambda: GenerationParams(context_cap=360, max_tokens=64)
    tray.add_paths([str(first)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    tray.add_paths([str(second)])
    qtbot.waitUntil(lambda: len(tray.ready_documents()) == 2, timeout=10_000)
    a, b = tray._chips
    qtbot.waitUntil(lambda: b.doc.too_big, timeout=5000)  # the draft's plan: together the second sends passages
    assert not a.doc.too_big  # each fits alone
    assert "too big for the context" in b.status.text() and "too big" not in a.status.text()
    assert tray.summary.text().startswith("first.txt ") and "second.txt: passages, up to " in tray.summary.text()
    assert "beta" not in engine.prefills[-1][1][-1]["content"]  # only what goes whole is read ahead
    a.remove_button.click()  # now the second one fits whole: it is read ahead
    qtbot.waitUntil(lambda: "beta" in engine.prefills[-1][1][-1]["content"], timeout=5000)
    assert not b.doc.too_big and "too big" not in b.status.text()
    assert tray.summary.text().startswith("second.txt ")
    # The reply's room counts: a document that fits the context but not beside the reply is too big.
    tray.params = lambda: GenerationParams(context_cap=360, max_tokens=150)  # 360 - 90 - 64 = 206 < 210
    window.chat.prefill_draft(window.composer.text())  # the draft planned again
    qtbot.waitUntil(lambda: b.doc.too_big, timeout=5000)
    send(qtbot, window, "What about beta?")
    sent = engine.calls[-1][1][-1]["content"]
    assert 'excerpts="passages related to the question"' in sent


def test_sizes_follow_the_open_chats_context_cap(qtbot, window, store, engine, tmp_path):
    doc = tmp_path / "notes.txt"
    doc.write_text("gamma words here. " * 70)  # about 210 tokens for the fake engine
    tray = window.composer.attachments
    tray.add_paths([str(doc)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    assert not tray.ready_documents()[0].too_big  # the model's whole context
    tray.clear()
    conv = store.create_conversation()
    store.update_settings(conv.id, {"context_cap": 300})  # Chat Settings: 300 - 75 reply - 64 template < 210
    window.chat.open_conversation(conv.id)
    tray.add_paths([str(doc)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    d = tray.ready_documents()[0]
    assert d.limit == 300 and d.too_big


def test_the_passages_for_the_question_typed_so_far_are_read_ahead(qtbot, window, store, engine, tmp_path):
    attach_too_big(qtbot, window, tmp_path)
    window.composer.set_text("Tell me about topic5")
    qtbot.waitUntil(lambda: any("topic5" in p[1][-1]["content"] for p in engine.prefills), timeout=5000)
    ahead = engine.prefills[-1][1][-1]["content"]
    assert 'excerpts="passages related to the question"' in ahead and "Page 5 is about" in ahead
    qtbot.waitUntil(lambda: window.statusBar().currentMessage().startswith("Read the passages of big.pdf"))
    send(qtbot, window, "Tell me about topic5")
    assert engine.calls[-1][1][-1]["content"] == ahead  # what was read ahead is exactly what is sent


def test_a_follow_ups_passages_are_read_ahead_too(qtbot, window, store, engine, tmp_path):
    attach_too_big(qtbot, window, tmp_path)
    send(qtbot, window, "Tell me about topic7")
    window.composer.set_text("And topic2?")  # no new document: the chat's big one gives its own passages
    qtbot.waitUntil(lambda: "topic2?" in engine.prefills[-1][1][-1]["content"], timeout=5000)
    ahead = engine.prefills[-1][1][-1]["content"]
    assert 'excerpts="passages related to the question"' in ahead and "Page 2 is about" in ahead
    qtbot.waitUntil(lambda: "passages of big.pdf for your question" in window.statusBar().currentMessage())
    send(qtbot, window, "And topic2?")
    assert engine.calls[-1][1][-1]["content"] == ahead  # read ahead exactly as sent
    window.chat.new_conversation()  # a chat without big documents reads the question alone
    window.composer.set_text("Hello")
    qtbot.waitUntil(lambda: engine.prefills[-1][1][-1]["content"] == "Hello", timeout=5000)


def test_a_message_is_not_sent_while_an_unreadable_files_chip_is_shown(qtbot, window, engine, tmp_path):
    (tmp_path / "photo.png").write_bytes(png_bytes())
    composer, tray = window.composer, window.composer.attachments
    tray.add_paths([str(tmp_path / "photo.png")])
    qtbot.waitUntil(lambda: bool(tray._chips and tray._chips[0].doc.error), timeout=10_000)
    composer.editor.setPlainText("What does the photo show?")
    calls = len(engine.calls)
    assert not composer.send_button.isEnabled()
    assert composer.reason_label.isVisible()
    assert composer.reason_label.text() == "photo.png could not be read: remove it (×) to send your message without it."
    from PySide6.QtTest import QTest

    QTest.keyClick(composer.editor, Qt.Key.Key_Return)
    qtbot.wait(100)
    assert len(engine.calls) == calls and composer.text() == "What does the photo show?"  # nothing dropped silently
    tray._chips[0].remove_button.click()
    qtbot.waitUntil(lambda: composer.send_button.isEnabled(), timeout=5000)
    assert not composer.reason_label.isVisible()
    send(qtbot, window, "What does the photo show?")
    assert engine.calls[-1][1][-1]["content"] == "What does the photo show?"


def test_reading_a_big_documents_passages_is_one_steady_line_with_cancel(qtbot, window, engine, tmp_path, monkeypatch):
    import asyncio

    from engine.types import PrefillProgress

    attach_too_big(qtbot, window, tmp_path)
    engine.prefill_progress = (PrefillProgress(0, 100, 100), PrefillProgress(20, 100, 100))
    engine.reading = asyncio.Event()  # the read stays at 20% until cancelled
    stops = []
    monkeypatch.setattr(engine, "stop", lambda conv_id=None: (stops.append(conv_id), engine.reading.set()))
    status = window.status
    qtbot.waitUntil(lambda: status.currentMessage() == "", timeout=5000)  # "big.pdf is too big…" said once
    line = "Reading the passages of big.pdf for your question… 20%"
    window.composer.set_text("Tell me about topic5")
    qtbot.waitUntil(lambda: status.state_label.text() == line, timeout=5000)
    model = status.model_label.text()
    assert model.startswith("Fake Small") and status.currentMessage() == ""  # no message over the model's name
    window._on_state(window.bridge.state)  # the engine says it is ready again: the line stays
    assert status.state_label.text() == line
    qtbot.wait(3300)  # longer than a status message lasts: nothing flickers back
    assert status.state_label.text() == line and status.model_label.text() == model and status.currentMessage() == ""
    assert status.cancel_button.isVisible()
    status.cancel_button.click()
    assert stops == [""]  # the background read ends; no reply is stopped
    qtbot.waitUntil(lambda: status.state_label.text() == "Ready", timeout=3000)
    assert not status.cancel_button.isVisible()


def test_at_the_minimum_size_a_big_documents_chip_elides_in_the_composer(qtbot, window, engine, tmp_path):
    from app.gui.window import MIN_SIZE

    window.resize(*MIN_SIZE)
    qtbot.waitUntil(lambda: window.width() == MIN_SIZE[0], timeout=3000)
    sidebar = window.sidebar.width()
    tray = attach_too_big(qtbot, window, tmp_path)
    chip = tray._chips[0]
    qtbot.waitUntil(lambda: "too big" in chip.status.text(), timeout=5000)
    qtbot.wait(50)  # the layout settles
    assert window.sidebar.width() == sidebar  # seen on X: squeezed to ~130 px
    composer = window.composer
    right = chip.mapTo(composer, chip.rect().topRight()).x()
    assert right <= composer.width()  # inside the composer, never cut at its edge
    assert chip.status.text().endswith("or × to cancel")  # the whole text stays (the tooltip has it)
    shown = chip.status.shown()
    assert shown.endswith("…") and chip.status.fontMetrics().horizontalAdvance(shown) <= chip.status.width()
    assert chip.toolTip().startswith("big.pdf")
    summary = tray.summary
    assert summary.isVisible() and summary.mapTo(composer, summary.rect().topRight()).x() <= composer.width()
    window.grab().save(str(tmp_path / "min.png"))
