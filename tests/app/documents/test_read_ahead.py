"""A document is read into the conversation's cache when it is attached (engine.prefill of the draft),
so sending computes only the question; the reply equals a fresh computation (greedy). Tiny model."""

from app.core.document_block import Attachment, document_block, message_content
from app.documents.extract import extract
from engine.types import GenerationParams, PrefillProgress, TextDelta
from tests.app.documents.files import write_pdf

PARAMS = GenerationParams(temperature=0.0, max_tokens=8, speculative=False)
PAGES = [f"Page {n} of the report: the quick brown fox jumps over the lazy dog {n} times. " * 6 for n in range(1, 4)]


async def _turn(engine, conv, messages):
    stats, ids = None, []
    async for ev in engine.chat(conv, messages, PARAMS):
        if isinstance(ev, TextDelta):
            ids.extend(ev.token_ids)
        elif not isinstance(ev, PrefillProgress):
            stats = ev
    return stats


def test_attach_time_prefill_is_reused(engine_with, tmp_path):
    doc = extract(write_pdf(tmp_path / "report.pdf", PAGES))
    item = Attachment(doc.name, doc.text, doc.kind)
    question = "What is on page 2?"

    async def body(engine):
        size = await engine.count_tokens(document_block(item))
        assert size.exact and size.context_limit == 2048 and size.tokens > 200
        # Attached: the draft is the document's block alone, read while the question is typed.
        ahead = await engine.prefill("chat", [{"role": "user", "content": message_content("", [item])}], PARAMS)
        assert ahead.finished and ahead.computed_tokens >= size.tokens
        sent = [{"role": "user", "content": message_content(question, [item])}]
        after = await _turn(engine, "chat", sent)
        fresh = await _turn(engine, "fresh", sent)
        # Follow-up: the prompt begins with exactly the ids the cache holds.
        sent2 = sent + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "And page 3?"}]
        follow = await _turn(engine, "chat", sent2)
        return size, after, fresh, follow, (await engine.count_tokens(question)).tokens

    size, after, fresh, follow, question_tokens = engine_with(body, idle_work=False)
    assert fresh.reused_tokens == len(fresh.prompt_ids) - 1  # a new chat with the same document: shared
    assert after.prompt_ids == fresh.prompt_ids
    assert after.reply_ids == fresh.reply_ids  # the same reply as reading it all at once (greedy)
    assert after.reused_tokens >= size.tokens  # the document was not read again
    # Only the question, the template's tail and the few tokens at the block's boundary.
    assert after.prefilled_tokens <= question_tokens + 16
    assert follow.prompt_ids[: len(after.prompt_ids)] == after.prompt_ids
    assert follow.reused_tokens >= len(after.prompt_ids)
