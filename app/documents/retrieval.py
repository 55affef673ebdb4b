"""Passages of a document too big for the context: chunks ranked by BM25 (bm25s) against each question.

No model download: BM25 scores words. Each chunk remembers where it came from (PDF page,
DOCX/Markdown section) so the reply can say which passages it was given.
"""

import re
from dataclasses import dataclass

from app.core.document_block import Attachment

# Characters per chunk: a few paragraphs, small enough that several fit beside a conversation.
CHUNK_CHARS = 1_500
_PAGE = re.compile(r"^\[page (\d+)\]$")
_HEADING = re.compile(r"^#{1,6} (.+)$")
# The reference line `passages` puts before each chunk (Chunk.reference in brackets).
_REFERENCE = re.compile(r"^\[((?:page \d+)(?:, “[^\n]*”)?|“[^\n]*”|passage \d+)\]$", re.M)


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    page: int = 0  # 0: not a PDF
    section: str = ""

    @property
    def reference(self) -> str:
        parts = [f"page {self.page}"] if self.page else []
        if self.section:
            parts.append(f"“{self.section}”")
        return ", ".join(parts) or f"passage {self.index + 1}"

    @property
    def marked(self) -> str:
        """The chunk as a message carries it: its reference line, then its text."""
        return f"[{self.reference}]\n{self.text}"


def chunk(text: str, size: int = CHUNK_CHARS) -> list[Chunk]:
    """Paragraph-aligned chunks of about `size` characters; a chunk never spans two PDF pages."""
    chunks: list[Chunk] = []
    page, section = 0, ""
    buf: list[str] = []

    def flush() -> None:
        body = "\n\n".join(buf).strip()
        if body:
            chunks.append(Chunk(len(chunks), body, page, section))
        buf.clear()

    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        first, _, rest = para.partition("\n")
        match = _PAGE.match(first)
        if match:
            flush()
            page, para = int(match.group(1)), rest.strip()
        heading = _HEADING.match(para.partition("\n")[0])
        if heading:
            flush()
            section = heading.group(1).strip()[:80]
        while len(para) > size:  # one huge paragraph: cut it at a space
            cut = para.rfind(" ", 0, size)
            cut = cut if cut > size // 2 else size
            buf.append(para[:cut])
            flush()
            para = para[cut:].strip()
        if buf and sum(len(b) for b in buf) + len(para) > size:
            flush()
        if para:
            buf.append(para)
    flush()
    return chunks


class Index:
    """One document's chunks, indexed once; `passages` picks them per question."""

    def __init__(self, name: str, text: str, kind: str = "text", size: int = 0, sha256: str = "") -> None:
        import bm25s

        self.name, self.kind, self.size, self.sha256 = name, kind, size, sha256
        self.chunks = chunk(text)
        self._retriever = bm25s.BM25()
        tokens = bm25s.tokenize([c.text for c in self.chunks], stopwords="en", show_progress=False)
        self._retriever.index(tokens, show_progress=False)

    def ranked(self, question: str) -> list[Chunk]:
        import bm25s

        query = bm25s.tokenize([question], stopwords="en", show_progress=False)
        if not query.vocab or not self.chunks:
            return list(self.chunks)  # no scoring words: the document's beginning
        k = len(self.chunks)
        results, scores = self._retriever.retrieve(query, k=k, show_progress=False)
        order = [int(i) for i, s in zip(results[0], scores[0], strict=True) if s > 0]
        # Nothing related: the document's beginning, rather than no passage at all.
        return [self.chunks[i] for i in order] or list(self.chunks)

    def passages(self, question: str, max_chars: int, sent: str = "") -> tuple[Attachment, list[str]]:
        """The best-ranked chunks that fit in `max_chars`, in document order, and their references.

        A chunk already in `sent` (the text of the messages the turn sends with it) keeps its place
        in the pick but is left out: a follow-up adds only what the context does not hold yet."""
        chosen, used = [], 0
        ranked = self.ranked(question)
        for c in ranked:
            cost = len(c.text) + 40
            if used + cost > max_chars:
                continue
            chosen.append(c)
            used += cost
        if not chosen and ranked and max_chars > 200:  # no chunk fits whole: the best one, cut at a space
            best = ranked[0]
            cut = best.text.rfind(" ", 0, max_chars - 40)
            chosen = [Chunk(best.index, best.text[: cut if cut > 0 else max_chars - 40], best.page, best.section)]
        chosen = sorted((c for c in chosen if c.marked not in sent), key=lambda c: c.index)
        text = "\n\n".join(c.marked for c in chosen)
        item = Attachment(self.name, text, self.kind, passages=True, size=self.size, sha256=self.sha256)
        return item, [c.reference for c in chosen]


def references(passages: str) -> list[str]:
    """The references of the chunks in a `passages` text (what the reply was given), in order."""
    return [
        m.group(1)
        for m in _REFERENCE.finditer(passages)
        if m.start() == 0 or passages[m.start() - 2 : m.start()] == "\n\n"
    ]
