"""Exactness on the starter model: a document read at attach is reused by the question's turn, the reply
equals a fresh computation of the same ids (greedy), and a follow-up begins with exactly the cached ids."""

import pytest

from app.documents.block import Attachment, message_content
from engine.models.folders import STARTER_ID
from engine.types import GenerationParams, PrefillProgress, TextDelta

pytestmark = pytest.mark.starter

PARAMS = GenerationParams(temperature=0.0, max_tokens=6, speculative=False)
DOC = Attachment(
    "report.pdf",
    "[page 1]\nSales of green tea rose by 12 percent.\n\n[page 2]\nThe team grew from 8 to 11 people.",
    "pdf",
)


async def _turn(engine, conv, messages):
    stats = None
    async for ev in engine.chat(conv, messages, PARAMS):
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
