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
