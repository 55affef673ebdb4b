"""The document block (one per file, name and page markers) and the passages path (bm25s over chunks)."""

from app.core.document_block import Attachment, document_block, message_content
from app.documents.retrieval import Index, chunk, references


def test_block_format():
    item = Attachment('my "q3"\nreport.pdf', "[page 1]\nHello\n", "pdf")
    block = document_block(item)
    assert block == "<document name=\"my 'q3' report.pdf\">\n[page 1]\nHello\n</document>\n\n"
    assert message_content("Why?", [item, item]) == block + block + "Why?"
    # The draft (no question yet) is a prefix of every sent message: the read-ahead is reused.
    assert message_content("Why?", [item]).startswith(message_content("", [item]))
    assert message_content("plain") == "plain"


def test_chunks_keep_pages_and_sections():
    text = "[page 1]\n# Intro\n\nAlpha text.\n\n[page 2]\nBeta text.\n\n## Costs\n\nGamma text."
    chunks = chunk(text)
    assert [(c.page, c.section, c.text.split()[-1]) for c in chunks] == [
        (1, "Intro", "text."),
        (2, "Intro", "text."),
        (2, "Costs", "text."),
    ]
    assert chunks[0].reference == "page 1, “Intro”"


def test_passages_pick_related_chunks_in_order():
    pages = [f"[page {n}]\n" + ("Filler words about nothing in particular. " * 40) for n in range(1, 30)]
    pages[16] = "[page 17]\nThe submarine budget for the harbour was 42 million."
    pages[3] = "[page 4]\nA submarine was seen near the harbour."
    index = Index("big.pdf", "\n\n".join(pages), "pdf")
    item, refs = index.passages("What was the submarine budget?", max_chars=1200)
    assert item.passages and item.name == "big.pdf"
    assert refs[:2] == ["page 4", "page 17"]  # document order, both related pages chosen
    assert "42 million" in item.text and len(item.text) <= 1200
    assert 'excerpts="passages related to the question"' in document_block(item)
    assert references(item.text) == refs  # what the window shows under the reply, read back from the stored text


def test_references_read_only_the_reference_lines():
    text = "[page 2, “Costs”]\nThe cost [page 9]\n[1] a footnote\n\n[passage 4]\nMore.\n\n[“Intro”]\nHi."
    assert references(text) == ["page 2, “Costs”", "passage 4", "“Intro”"]
    assert references("") == [] and references("[page 3] inline") == []


def test_ranking_is_bm25s_ranking():
    """The index is built here, in bounded memory, but ranks as bm25s does: the same scores (float32, to
    the bit), best first; equal scores in document order."""
    import random

    import bm25s

    rng = random.Random(7)
    words = "submarine harbour budget million the of and Alpha beta école naïve 42 x costs page".split()
    paragraphs = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 300))) for _ in range(60)]
    index = Index("mixed.txt", "\n\n".join(paragraphs))
    reference = bm25s.BM25()
    reference.index(bm25s.tokenize([c.text for c in index.chunks], stopwords="en", show_progress=False))
    for question in ["submarine budget?", "École naïve 42", "harbour harbour costs", "Alpha"]:
        query = bm25s.tokenize([question], stopwords="en", show_progress=False)
        ids, scores = reference.retrieve(query, k=len(index.chunks), show_progress=False)
        score = dict(zip(ids[0].tolist(), scores[0].tolist(), strict=True))
        expected = sorted((i for i in score if score[i] > 0), key=lambda i: (-score[i], i))
        assert [c.index for c in index.ranked(question)] == expected
    assert index.ranked("the of and") == index.chunks  # no scoring word: the document's beginning


_INDEX_CHILD = """
import itertools, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from app.documents.retrieval import Index
# 8,000,000 characters in one paragraph (the most a document may hold), 2.7 million words, each distinct:
# two CJK characters. Built in pieces, so the text, not its making, is what the child holds.
pairs = ("".join(p) for p in itertools.product([chr(0x4E00 + i) for i in range(2000)], repeat=2))
pieces = []
while sum(map(len, pieces)) < 8_000_000 - 3_000:
    pieces.append(" ".join(itertools.islice(pairs, 1_000)))
text = " ".join(pieces)
del pieces
index = Index("one paragraph.txt", text)
with open("/proc/self/status") as f:
    peak = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
word = text[3_000_003:3_000_005]
print(json.dumps({"chunks": len(index.chunks), "rejoined": " ".join(c.text for c in index.chunks) == text,
                  "found": [word in c.text.split() for c in index.ranked(word)], "peak": peak}))
"""


def test_one_paragraph_of_distinct_words_is_indexed_in_bounded_memory():
    """Issue 35: bm25s kept Python objects for every distinct word (a string, an int, dict and set entries):
    8 million characters of one paragraph of distinct words peaked near 800 MB. A word is now its hash, per chunk."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pytest

    if not Path("/proc/self/status").exists():
        pytest.skip("VmHWM (peak resident memory) is read from /proc")
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", _INDEX_CHILD], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-600:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["chunks"] > 5_000 and result["rejoined"]  # cut at spaces, nothing lost
    assert result["found"] == [True]  # the one chunk holding the word
    assert result["peak"] < 500 * 2**20, f"peak {result['peak'] / 2**20:.0f} MiB"
