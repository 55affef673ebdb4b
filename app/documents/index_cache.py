"""The indexes of documents too big for the context (retrieval.py), kept between questions so each is
built once: the least recently used goes past MAX_INDEXES, or past MAX_TEXT_CHARS of their documents'
text (an index holds the text's chunks). The newest always stays."""

from collections import OrderedDict

from app.documents.retrieval import Index

MAX_INDEXES = 8
MAX_TEXT_CHARS = 40_000_000  # 40 M characters of documents (about 10 M tokens): their chunks and postings


class IndexCache:
    def __init__(self, max_indexes: int = MAX_INDEXES, max_chars: int = MAX_TEXT_CHARS) -> None:
        self.max_indexes, self.max_chars = max_indexes, max_chars
        self._indexes: OrderedDict[str, tuple[Index, int]] = OrderedDict()  # sha256 -> (index, its text's length)

    def __len__(self) -> int:
        return len(self._indexes)

    def get(self, sha256: str, name: str, text: str, kind: str = "text") -> Index:
        """The document's index: the one built before, or a new one (and the least recently used go)."""
        held = self._indexes.pop(sha256, None)
        index = held[0] if held is not None else Index(name, text, kind, sha256=sha256)
        self._indexes[sha256] = (index, len(text))
        while len(self._indexes) > 1 and (
            len(self._indexes) > self.max_indexes or sum(n for _, n in self._indexes.values()) > self.max_chars
        ):
            self._indexes.popitem(last=False)
        return index
