"""app/documents/turn.py: what a message with documents will take of the context, as the user reads it."""

import pytest

from app.documents.turn import context_share


@pytest.mark.parametrize(
    "tokens, limit, shown",
    [
        (6812, 8192, "83% of the context"),
        (38, 8192, "<1% of the context"),  # seen on X: a short DOCX read "0% of the context"
        (41, 8192, "1% of the context"),
        (8192, 8192, "100% of the context"),
        (0, 8192, "0% of the context"),
    ],
)
def test_context_share(tokens, limit, shown):
    assert context_share(tokens, limit) == shown


def test_a_follow_up_sends_only_passages_not_already_in_the_chat(engine_with, tmp_path):
    """Issue 35: each follow-up on a too-big document carried a full budget again, repeating pages
    already in the conversation. The second question's message adds only the pages not sent yet."""
    from app.core.document_block import Attachment
    from app.documents.extract import extract
    from app.documents.turn import prepare
    from engine.types import GenerationParams
    from tests.app.documents.files import write_pdf

    pages = [f"Page {n} is about topic{n} and nothing else. " * 12 for n in range(1, 17)]
    doc = extract(write_pdf(tmp_path / "big.pdf", pages))
    params = GenerationParams(max_tokens=8, context_cap=1024)

    async def body(engine):
        indexes: list = []
        item = Attachment(doc.name, doc.text, doc.kind, size=doc.size, sha256=doc.sha256)
        history = [{"role": "system", "content": "You are terse."}]
        first = await prepare(engine, history, "What about topic3 and topic5?", [item], params, indexes)
        history += [{"role": "user", "content": first.content}, {"role": "assistant", "content": "Both."}]
        second = await prepare(engine, history, "And topic3 next to topic6?", [], params, indexes)
        return first, second

    first, second = engine_with(body, idle_work=False)
    assert first.notes and first.references == ["big.pdf: page 3", "big.pdf: page 5"]
    assert second.references == ["big.pdf: page 6"]  # page 3 is in the first message already
    (passages,) = second.attachments
    assert passages.passages and "topic6" in passages.text and "topic3" not in passages.text
    for block in passages.text.split("\n\n["):
        assert block.lstrip("[") not in first.content
    assert 0 < second.document_tokens < first.document_tokens


def test_documents_go_whole_in_the_order_attached_while_each_fits():
    """Two documents that fit alone but not together: the first goes whole, the second sends passages
    (with a line saying so), as the window's chips have always said; the terminal plans the same."""
    import asyncio

    from app.core.document_block import Attachment
    from app.documents.turn import prepare
    from engine.types import GenerationParams
    from tests.app_helpers import FakeEngine

    engine = FakeEngine()
    first = Attachment("first.txt", "alpha words here. " * 70, sha256="a" * 64)
    second = Attachment("second.txt", "beta words here. " * 70, sha256="b" * 64)
    params = GenerationParams(context_cap=360, max_tokens=64)  # 360 - 64 reply - 64 template: 232 free

    async def body():
        await engine.load_model("fake-small")
        return await prepare(engine, [], "What about beta?", [first, second], params)

    turn = asyncio.run(body())
    assert [(a.name, a.passages) for a in turn.attachments] == [("first.txt", False), ("second.txt", True)]
    assert len(turn.notes) == 1 and turn.notes[0].startswith("second.txt is too big for the context")
    stored = turn.stored({second.sha256: second.text})
    assert stored[1].text == second.text and stored[1].passages  # the whole text kept beside the passages


_COUNT_CHILD = """
import asyncio, json, random, sys, time
from app.core.document_block import Attachment
from app.documents.turn import count_tokens, prepare
from engine import Engine
from engine.types import GenerationParams

def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

async def main():
    engine = Engine(idle_work=False)
    await engine.load_model(sys.argv[1])
    params = GenerationParams(max_tokens=8)
    words = random.Random(3).choices(["alpha", "river", "stone", "garden", "window", "copper"], k=500_000)
    text = " ".join(words)  # about 3 MB, one paragraph
    small = " ".join(words[:20_000])
    await prepare(engine, [], "What about stones?", [Attachment("small.txt", small)], params)  # warm up
    before = peak()
    started = time.monotonic()
    turn = await prepare(engine, [], "What about stones?", [Attachment("one.txt", text)], params)
    print(json.dumps({"grew": peak() - before, "seconds": time.monotonic() - started, "notes": turn.notes,
                      "pieces": (await count_tokens(engine, small * 3, params)).tokens,
                      "whole": (await engine.count_tokens(small * 3, params)).tokens}))
    await engine.close()

asyncio.run(main())
"""


def test_a_big_one_paragraph_document_is_counted_in_bounded_memory(tiny_model_path):
    """Issue 35, re-tried: a 7.7 MB one-paragraph text still peaked near 1.8 GB in `chinwag chat --attach` (the
    index was bounded; counting its tokens in one tokenizer call took near 1 GB). It is counted in pieces."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux's /proc/self/status (VmHWM)")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_CHILD, str(tiny_model_path)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["notes"] and "too big for the context" in result["notes"][0]
    assert result["pieces"] == result["whole"]  # counted in pieces, the same count
    assert result["grew"] < 120 << 20, f"counting grew the peak by {result['grew'] >> 20} MB"
