"""Passages of a document too big for the context: chunks ranked by BM25 (bm25s) against each question.

No model download: BM25 scores words. Each chunk remembers where it came from (PDF page,
DOCX/Markdown section) so the reply can say which passages it was given.

The index is bm25s's (its tokenizer, English stopwords and default Lucene scoring, the same float32
scores), built here in bounded memory: bm25s keeps a Python string, int and dict entries for every
distinct word: near 800 MB for 8 million characters of distinct words. Here a word is its hash, one chunk at a time,
and the index is a few numpy arrays (about 24 bytes a posting).
"""

import math
import re
from dataclasses import dataclass

import numpy as np
from bm25s.stopwords import STOPWORDS_EN

from app.core.document_block import Attachment

# Characters per chunk: a few paragraphs, small enough that several fit beside a conversation.
CHUNK_CHARS = 1_500
_PAGE = re.compile(r"^\[page (\d+)\]$")
_HEADING = re.compile(r"^#{1,6} (.+)$")
# The reference line `passages` puts before each chunk (Chunk.reference in brackets).
_REFERENCE = re.compile(r"^\[((?:page \d+)(?:, “[^\n]*”)?|“[^\n]*”|passage \d+)\]$", re.M)
_NON_SPACE = re.compile(r"\S")  # re's \s is str.isspace, so this finds where str.strip() would stop
# bm25s's defaults: `bm25s.tokenize(..., stopwords="en")` and `bm25s.BM25()` (method "lucene", k1, b).
_WORD = re.compile(r"(?u)\b\w\w+\b")
_STOPWORDS = frozenset(STOPWORDS_EN)
_K1, _B = 1.5, 0.75


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
        start = 0  # one huge paragraph: cut it at a space, walking an offset (copying the rest is quadratic)
        while len(para) - start > size:
            cut = para.rfind(" ", start, start + size) - start
            cut = cut if cut > size // 2 else size
            buf.append(para[start : start + cut])
            flush()
            rest = _NON_SPACE.search(para, start + cut)
            start = rest.start() if rest else len(para)
        para = para[start:] if start else para
        if buf and sum(len(b) for b in buf) + len(para) > size:
            flush()
        if para:
            buf.append(para)
    flush()
    return chunks


class Index:
    """One document's chunks, indexed once; `passages` picks them per question."""

    def __init__(self, name: str, text: str, kind: str = "text", size: int = 0, sha256: str = "") -> None:
        self.name, self.kind, self.size, self.sha256 = name, kind, size, sha256
        self.chunks = chunk(text)
        # Each chunk's distinct words and their counts; nothing per word outlives its chunk.
        words, counts = [], []
        lengths = np.zeros(len(self.chunks), np.int64)
        for c in self.chunks:
            hashes = np.array(_words(c.text), np.int64)
            lengths[c.index] = len(hashes)
            distinct, n = np.unique(hashes, return_counts=True)
            words.append(distinct)
            counts.append(n)
        word = np.concatenate(words) if words else np.zeros(0, np.int64)
        doc = np.repeat(np.arange(len(self.chunks), dtype=np.int32), [len(w) for w in words])
        tf = np.concatenate(counts).astype(np.float64) if counts else np.zeros(0)
        del words, counts
        # The vocabulary (sorted hashes) and, per word, its postings: the chunks holding it and their scores.
        self._vocab, word_id = np.unique(word, return_inverse=True)
        del word
        df = np.bincount(word_id, minlength=len(self._vocab))
        self._starts = np.concatenate([[0], np.cumsum(df)])
        self._docs, self._scores = _postings(word_id, doc, tf, df, lengths)

    def ranked(self, question: str) -> list[Chunk]:
        query = _words(question)
        if not query or not self.chunks:
            return list(self.chunks)  # no scoring words: the document's beginning
        scores = np.zeros(len(self.chunks), np.float32)
        # As bm25s: each query word in turn (a repeated word counts again), summed in float32.
        for h, i in zip(query, np.searchsorted(self._vocab, query).tolist(), strict=True):
            if i < len(self._vocab) and self._vocab[i] == h:
                start, end = self._starts[i], self._starts[i + 1]
                scores[self._docs[start:end]] += self._scores[start:end]
        order = np.argsort(-scores, kind="stable")  # equal scores: document order
        # Nothing related: the document's beginning, rather than no passage at all.
        return [self.chunks[i] for i in order[scores[order] > 0].tolist()] or list(self.chunks)

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


def _words(text: str) -> list[int]:
    """The words bm25s would index (lowercase, two word characters or more, no English stopword), each as
    its hash: 64 bits, so two of a document's words collide with odds below one in a million; the hash is
    this process's, like the index."""
    return [hash(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


def _postings(
    word_id: np.ndarray, doc: np.ndarray, tf: np.ndarray, df: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each posting's chunk and float32 score, grouped by word: bm25s's Lucene BM25, in its order of
    operations, so the scores are bm25s's to the bit."""
    n = len(lengths)
    idf = np.array([math.log(1 + (n - d + 0.5) / (d + 0.5)) for d in range(n + 1)], np.float32)[df]
    average = lengths.mean() if lengths.any() else 1.0
    norm = _K1 * ((1 - _B) + _B * lengths / average)
    scores = (idf[word_id].astype(np.float64) * (tf / (norm[doc] + tf))).astype(np.float32)
    order = np.argsort(word_id, kind="stable")
    return doc[order], scores[order]


def references(passages: str) -> list[str]:
    """The references of the chunks in a `passages` text (what the reply was given), in order."""
    return [
        m.group(1)
        for m in _REFERENCE.finditer(passages)
        if m.start() == 0 or passages[m.start() - 2 : m.start()] == "\n\n"
    ]
