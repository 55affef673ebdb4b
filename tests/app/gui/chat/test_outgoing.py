"""The window sends a document as the terminal does (app/documents/turn.py prepare), also where the
tray's own rules (QUESTION_ROOM, a passages budget of its own) used to send it differently: a real
PDF too big for the context, its first question and a follow-up."""

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.core.document_block import Attachment
from app.core.settings import engine_messages
from app.documents.extract import extract
from app.documents.retrieval import Index
from app.documents.turn import prepare
from engine.context.policy import reply_room
from engine.types import ChatMessage, GenerationParams
from tests.app.documents.files import write_pdf
from tests.app_helpers import FakeEngine, run, send

pytestmark = pytest.mark.qt


def test_a_big_document_is_sent_from_the_window_as_the_terminal_sends_it(qtbot, window, store, engine, tmp_path):
    pages = [f"Page {n} is about topic{n} and nothing else. " * 12 for n in range(1, 9)]
    pdf = write_pdf(tmp_path / "big.pdf", pages)
    params = GenerationParams(context_cap=600)
    tray = window.composer.attachments
    tray.params = lambda: params
    tray.add_paths([str(pdf)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    doc = extract(pdf)
    item = Attachment(doc.name, doc.text, doc.kind, size=doc.size, sha256=doc.sha256)

    send(qtbot, window, "Tell me about topic7")
    indexes: list = []  # the terminal's: the chat's documents too big for the context
    terminal = run(qtbot, prepare(engine, [], "Tell me about topic7", [item], params, indexes))
    assert engine.calls[-1][1][-1]["content"] == terminal.content
    # The tray's old rule gave the passages (600 - 150 reply - 256 question) // 2 tokens: fewer pages.
    old = Index(doc.name, doc.text, doc.kind).passages(
        "Tell me about topic7", (600 - reply_room(4096, 600) - 256) // 2 * 3
    )
    assert len(old[1]) < len(terminal.references)
    stored = store.get_conversation(window.chat.conv_id).messages[0].attachments[0]
    assert stored.text == doc.text and stored.passages  # the whole text kept beside the passages sent

    send(qtbot, window, "And what about topic3?")
    history = engine_messages(store.get_conversation(window.chat.conv_id).messages[:2], "")
    typed = [ChatMessage.from_openai(m) for m in history]
    follow = run(qtbot, prepare(engine, typed, "And what about topic3?", [], params, indexes))
    assert engine.calls[-1][1][-1]["content"] == follow.content
    assert "topic3" in follow.content


def test_a_message_with_a_document_sent_while_the_model_loads_waits_for_it(qtbot, qloop, store, tmp_path):
    from app.gui.window import MainWindow

    engine = FakeEngine()
    engine.load_delay = 0.5
    w = MainWindow(store, engine)
    qtbot.addWidget(w)
    w.show()
    task = w.start_engine("fake-small")
    note = tmp_path / "note.txt"
    note.write_text("Pears are green.", encoding="utf-8")
    tray = w.composer.attachments
    tray.add_paths([str(note)])
    qtbot.waitUntil(lambda: bool(tray.ready_documents()), timeout=10_000)
    assert w.bridge.current_model is None  # still loading: planning must wait for the tokenizer
    w.composer.set_text("What colour are pears?")
    QTest.keyClick(w.composer.editor, Qt.Key.Key_Return)
    qtbot.waitUntil(task.done, timeout=5000)
    qtbot.waitUntil(lambda: bool(engine.calls) and w.chat.gen is None, timeout=5000)
    sent = engine.calls[-1][1][-1]["content"]
    assert "Pears are green." in sent and sent.endswith("What colour are pears?")
    assert not w.notices.texts()  # no "no model is loaded"
    w.close()
    run(qtbot, w.shutdown())
