"""Exactness on the starter model: a document read at attach is reused by the question's turn, the reply
equals a fresh computation of the same ids (greedy), a follow-up begins with exactly the cached ids, and a
window slide drops a document whole."""

import pytest

from app.core.document_block import Attachment, message_content
from engine.models.folders import STARTER_ID
from engine.types import GenerationParams, PrefillProgress, TextDelta

pytestmark = pytest.mark.starter

PARAMS = GenerationParams(temperature=0.0, max_tokens=6, speculative=False)
DOC = Attachment(
    "report.pdf",
    "[page 1]\nSales of green tea rose by 12 percent.\n\n[page 2]\nThe team grew from 8 to 11 people.",
    "pdf",
)


async def _turn(engine, conv, messages, params=PARAMS):
    stats = None
    async for ev in engine.chat(conv, messages, params):
        if not isinstance(ev, TextDelta | PrefillProgress):
            stats = ev
    return stats


def test_read_at_attach_on_the_starter(tmp_path):
    from tests.conftest import run_with_engine

    async def body(engine):
        ahead = await engine.prefill("chat", [{"role": "user", "content": message_content("", [DOC])}], PARAMS)
        sent = [{"role": "user", "content": message_content("How much did tea sales rise?", [DOC])}]
        after = await _turn(engine, "chat", sent)
        fresh = await _turn(engine, "fresh", sent)
        follow = await _turn(
            engine, "chat", sent + [{"role": "assistant", "content": "12%"}, {"role": "user", "content": "Staff?"}]
        )
        return ahead, after, fresh, follow

    ahead, after, fresh, follow = run_with_engine(STARTER_ID, body, idle_work=False)
    # The document's tokens are reused; only the question, the template's tail and the separator after
    # the block (retokenized with the question's first word) are computed.
    assert ahead.finished and after.reused_tokens >= ahead.computed_tokens - 8
    assert after.prefilled_tokens <= after.prompt_tokens - ahead.computed_tokens + 8
    assert after.prompt_ids == fresh.prompt_ids and after.reply_ids == fresh.reply_ids
    assert follow.prompt_ids[: len(after.prompt_ids)] == after.prompt_ids


def test_a_window_slide_drops_a_document_whole_on_the_starter():
    """Past the context limit the window drops whole turns: the document's block is in the prompt whole or
    not at all, and each turn after the slide equals a fresh computation of the messages it kept."""
    from tests.conftest import run_with_engine

    # Small: on the reference BLAS (a system without OpenBLAS; tests/conftest.py preloads it where there
    # is one) the starter reads about ten tokens a second, and every turn is computed twice. Four turns:
    # the document's (78 tokens), a follow-up that keeps it (98 + 4 <= 110), the slide that drops both,
    # and one after the slide.
    params = GenerationParams(temperature=0.0, max_tokens=4, speculative=False, context_cap=110)
    first, last = 1, 2  # two notes: the first and the last are each checked to be in or out together
    doc = Attachment(
        "notes.txt", "\n\n".join(f"Note {n}: shelf {n} holds {n * 3} jars." for n in range(first, last + 1))
    )
    questions = ["Which shelf holds 6 jars?"] + [f"And shelf {n}?" for n in range(1, 4)]

    async def body(engine):
        messages, seen = [], []
        for i, q in enumerate(questions):
            messages.append({"role": "user", "content": message_content(q, [doc] if i == 0 else [])})
            stats = await _turn(engine, "chat", messages, params)
            kept = messages[stats.dropped_messages :]
            fresh = await _turn(engine, f"fresh{i}", kept, params)
            text = engine._local.session.tokenizer.decode(list(stats.prompt_ids))
            seen.append((stats, fresh, text))
            messages.append({"role": "assistant", "content": engine._local.session.tokenizer.decode(stats.reply_ids)})
        return seen

    seen = run_with_engine(STARTER_ID, body, idle_work=False)
    assert any(stats.dropped_messages for stats, _, _ in seen)  # the window did slide
    # ... after a follow-up that kept the document, and a turn follows the slide.
    assert [bool(stats.dropped_messages) for stats, _, _ in seen] == [False, False, True, True]
    assert "<document" in seen[0][2] and "</document>" in seen[0][2]
    for stats, fresh, text in seen:
        assert (
            ("<document" in text) == ("</document>" in text) == (f"Note {last}:" in text) == (f"Note {first}:" in text)
        )
        assert stats.prompt_ids == fresh.prompt_ids and stats.reply_ids == fresh.reply_ids
