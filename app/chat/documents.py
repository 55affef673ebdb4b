"""What a saved chat gives the one document planner (app/documents/turn.py `prepare`) besides the
new documents: the indexes of its documents that were sent as passages, so a follow-up gets its own
passages as in the terminal, and their whole texts, which the store keeps beside the passages."""

from collections.abc import Iterable
from typing import Any

from app.core.attachments import StoredAttachment
from app.core.document_block import Attachment
from app.documents.retrieval import Index
from app.documents.turn import index_of


def attachment(stored: StoredAttachment) -> Attachment:
    """A stored document, whole, as the planner takes it."""
    return Attachment(stored.name, stored.text, stored.kind, size=stored.size, sha256=stored.sha256)


def chat_indexes(messages: Iterable[Any]) -> list[Index]:
    """The indexes of the documents of `messages` (store Messages) that were sent as passages, each once."""
    out: dict[str, Index] = {}
    for m in messages:
        for a in getattr(m, "attachments", ()):
            if a.passages and a.sha256 not in out:
                out[a.sha256] = index_of(a.name, a.text, a.kind, a.size, a.sha256)
    return list(out.values())


def whole_texts(messages: Iterable[Any], documents: Iterable[Attachment] = ()) -> dict[str, str]:
    """The whole text of every document of `messages` and of `documents`, by sha256."""
    texts = {a.sha256: a.text for m in messages for a in getattr(m, "attachments", ())}
    return {**texts, **{d.sha256: d.text for d in documents if not d.passages}}
