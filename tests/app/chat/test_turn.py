"""The turn driver on the tiny model, without a front end: the order of writes to the store (the
user's message before the engine reads it, the reply as it streams), Stop before the engine's
turn begins, a refused turn that fails the reply and not the chat, a cancelled task that keeps
what was generated."""

import asyncio

from app.chat.events import Delta, Ended, TurnStarted
from app.chat.transcript import StoreTranscript
from app.chat.turn import TurnDriver
from app.core.store import MessageStatus
from engine import GenerationParams
from engine.types import ChatMessage, Role

PARAMS = GenerationParams(max_tokens=6, temperature=0.0)


def test_the_question_is_written_first_and_the_reply_as_it_streams(engine_with, store, monkeypatch):
    monkeypatch.setattr("app.chat.transcript.SAVE_INTERVAL_S", 0.0)  # every piece written
    seen: list = []  # (event, the rows the store held then)

    async def body(engine):
        transcript = StoreTranscript(store, "", "tiny")

        def on_event(ev):
            rows = store.get_conversation(transcript.conv_id).messages if transcript.conv_id else []
            seen.append((ev, [(m.role, m.content, m.status) for m in rows]))

        driver = TurnDriver(engine, transcript, on_event)
        return await driver.send([ChatMessage(Role.SYSTEM, "Be brief.")], "Hello", PARAMS)

    reply = engine_with(body)
    started = next(rows for ev, rows in seen if isinstance(ev, TurnStarted))
    assert started == [("user", "Hello", "complete"), ("assistant", "", "streaming")]
    text = ""
    for ev, rows in seen:
        if isinstance(ev, Delta):
            assert rows[-1][1] == text and rows[-1][2] == "streaming"  # written up to the piece before
            text += ev.text
    (ended,) = [ev for ev, _ in seen if isinstance(ev, Ended)]
    assert ended.status == MessageStatus.COMPLETE and reply.added[-1].content == text
    conv = store.get_conversation(store.list_conversations()[0].id)
    assert [(m.role, m.status) for m in conv.messages] == [("user", "complete"), ("assistant", "complete")]
    assert conv.messages[-1].content == text and conv.messages[-1].stats["generated_tokens"] >= 1


def test_stop_before_the_engine_begins_stops_the_reply(engine_with, store):
    async def body(engine):
        driver = TurnDriver(engine, StoreTranscript(store, "", "tiny"))
        task = asyncio.ensure_future(
            driver.send([], "A long one please", GenerationParams(max_tokens=200, temperature=0.0))
        )
        await asyncio.sleep(0)  # the reply is asked for; the engine has not begun it
        driver.stop()
        return await task

    reply = engine_with(body)
    assert reply.status == MessageStatus.STOPPED
    last = store.get_conversation(store.list_conversations()[0].id).messages[-1]
    assert last.status == MessageStatus.STOPPED and last.stats["generated_tokens"] < 200


def test_a_refused_turn_fails_the_reply_and_the_chat_goes_on(engine_with, store):
    async def body(engine):
        driver = TurnDriver(engine, StoreTranscript(store, "", "tiny"))
        refused = await driver.send([], "word " * 400, GenerationParams(max_tokens=4, context_cap=64))
        answered = await driver.send(refused.added, "Hi", PARAMS)
        return refused, answered

    refused, answered = engine_with(body)
    assert refused.status == MessageStatus.FAILED and "context" in refused.error
    assert answered.status == MessageStatus.COMPLETE
    rows = store.get_conversation(store.list_conversations()[0].id).messages
    assert [(m.role, m.status) for m in rows] == [
        ("user", "complete"), ("assistant", "failed"), ("user", "complete"), ("assistant", "complete"),
    ]  # fmt: skip


def test_a_cancelled_turn_keeps_what_was_generated_as_stopped(engine_with, store):
    async def body(engine):
        pieces: list = []
        driver = TurnDriver(
            engine, StoreTranscript(store, "", "tiny"), lambda ev: isinstance(ev, Delta) and pieces.append(ev.text)
        )
        task = asyncio.ensure_future(driver.send([], "Tell me more", GenerationParams(max_tokens=500, temperature=0.0)))
        while len(pieces) < 3 and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done()
        task.cancel()  # Ctrl+C in the terminal, the window closing
        try:
            await task
        except asyncio.CancelledError:
            pass
        return "".join(pieces)

    text = engine_with(body)
    last = store.get_conversation(store.list_conversations()[0].id).messages[-1]
    assert last.status == MessageStatus.STOPPED and last.content.startswith(text) and text


def test_a_document_sent_as_passages_keeps_its_whole_text_in_the_store(store):
    """The terminal's chat as saved: a document too big for the context sends passages, and the store
    keeps its whole text beside them (the window's follow-ups index the whole document from it)."""
    from app.core.document_block import Attachment
    from tests.app_helpers import FakeEngine

    engine = FakeEngine(reply="ok", token_delay=0)
    text = " ".join(f"Section {n} is about topic{n}." for n in range(200))
    doc = Attachment("big.txt", text, sha256="c" * 64, size=len(text))

    async def body():
        await engine.load_model("fake-small")
        driver = TurnDriver(engine, StoreTranscript(store, "", "fake-small"))
        await driver.send([], "What about topic7?", GenerationParams(context_cap=300), [doc], [])
        return driver.conv_id

    conv_id = asyncio.run(body())
    (stored,) = store.get_conversation(conv_id).messages[0].attachments
    assert stored.passages and "topic7." in stored.passages and stored.text == text
