"""The one way a document enters a user message: used by the window, the CLI, replay and remote models alike.

Documents come first and the question last, so the document's tokens are read into the cache
when it is attached (the draft is the block alone) and sending computes only the question.
Every block ends with the same separator whether a question follows or not, so the draft's
tokens are a prefix of the sent message's.
"""

from collections.abc import Sequence
from dataclasses import dataclass

SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Attachment:
    """What a message needs of a document: its name and the text to send (whole, or chosen passages)."""

    name: str
    text: str
    kind: str = "text"
    passages: bool = False  # True: `text` holds the passages picked for this question, not the whole document
    size: int = 0  # bytes of the original, and its hash: what the store keeps with the text
    sha256: str = ""


def _attribute(name: str) -> str:
    return " ".join(name.replace('"', "'").split())


def document_block(item: Attachment) -> str:
    """One template-friendly block: the file's name, then its text (PDFs carry [page N] markers)."""
    note = ' excerpts="passages related to the question"' if item.passages else ""
    return f'<document name="{_attribute(item.name)}"{note}>\n{item.text.strip()}\n</document>{SEPARATOR}'


def message_content(question: str, attachments: Sequence[Attachment] = ()) -> str:
    """The user message's content: every document's block, then the question."""
    return "".join(document_block(a) for a in attachments) + question
