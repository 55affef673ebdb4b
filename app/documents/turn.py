"""A user turn with documents, as every front end sends it: whole when it fits, else the passages most
related to the question (one line says so). Counts are the engine's, in the current model's tokens."""

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.attachments import StoredAttachment
from app.core.document_block import Attachment, document_block, message_content
from app.documents.index_cache import IndexCache
from app.documents.retrieval import Index
from engine.context.policy import reply_room
from engine.protocol import EngineAPI
from engine.types import ChatMessage, GenerationParams, TokenCount

# Tokens left free for the chat template's role markers around the messages.
TEMPLATE_SLACK = 64
# Characters per token assumed when sizing passages first; the engine's count then checks them.
CHARS_PER_TOKEN = 3
# The indexes of documents too big for the context, built once per document (a window builds a big
# one off the GUI thread as soon as it is attached: hence the lock).
INDEXES = IndexCache()
_INDEXES_LOCK = threading.Lock()


# Characters the tokenizer is given at once: its working memory grows with the text (a 7.7 MB paragraph took
# near 1 GB in one call). Pieces are cut before a space, where tokenizers split words anyway.
COUNT_PIECE_CHARS = 100_000


async def count_tokens(engine: EngineAPI, text: str, params: GenerationParams) -> TokenCount:
    """`engine.count_tokens(text)`, counted in pieces of at most COUNT_PIECE_CHARS characters."""
    if len(text) <= COUNT_PIECE_CHARS:
        return await engine.count_tokens(text, params)
    tokens, start = 0, 0
    while True:
        end = min(len(text), start + COUNT_PIECE_CHARS)
        if end < len(text):
            space = text.rfind(" ", start + COUNT_PIECE_CHARS // 2, end)
            end = space if space > 0 else end
        count = await engine.count_tokens(text[start:end], params)
        tokens += count.tokens
        start = end
        if start >= len(text):
            return TokenCount(tokens, count.context_limit, count.exact)


def index_of(name: str, text: str, kind: str = "text", size: int = 0, sha256: str = "") -> Index:
    """The document's index: built once per document (by its sha256), then kept in INDEXES."""
    if not sha256:
        return Index(name, text, kind, size, sha256)
    with _INDEXES_LOCK:
        index = INDEXES.get(sha256, name, text, kind)
    index.size = index.size or size
    return index


def context_share(tokens: int, limit: int) -> str:
    """ "83% of the context"; "<1%" for a small file, which "0%" would make look empty."""
    share = 100 * tokens / limit
    return f"{'<1' if 0 < share < 0.5 else f'{share:.0f}'}% of the context"


@dataclass
class Turn:
    content: str  # the user message's text: the documents' blocks, then the question
    attachments: list[Attachment]
    document_tokens: int  # tokens of the blocks of documents attached on this turn
    notes: list[str] = field(default_factory=list)  # one line per document sent as passages
    references: list[str] = field(default_factory=list)  # "report.pdf: page 4" for each passage used
    context_limit: int = 0

    @property
    def summary(self) -> str:
        """ "report.pdf 6,812 tokens · 83% of the context": what the message will take."""
        names = ", ".join(a.name for a in self.attachments)
        share = f" · {context_share(self.document_tokens, self.context_limit)}" if self.context_limit else ""
        return f"{names} {self.document_tokens:,} tokens{share}"

    def stored(self, texts: Mapping[str, str] | None = None) -> list[StoredAttachment]:
        """What the store keeps of the documents; rebuilt, they give the same message text. `texts`: the
        whole texts by sha256, kept beside a document's passages (else the passages stand in for it)."""
        texts = texts or {}
        return [
            StoredAttachment(
                a.name,
                a.kind,
                a.size,
                a.sha256,
                texts.get(a.sha256, a.text) if a.passages else a.text,
                a.text if a.passages else "",
            )
            for a in self.attachments
        ]


async def prepare(
    engine: EngineAPI,
    history: Sequence[ChatMessage | dict[str, Any]],
    question: str,
    documents: list[Attachment],
    params: GenerationParams,
    indexes: list[Index] | None = None,
) -> Turn:
    """The turn's content. `indexes` holds the conversation's documents too big for the context:
    new ones are added, and every later question gets its own passages from them."""
    indexes = indexes if indexes is not None else []
    typed = [ChatMessage.from_openai(m, f"messages[{i}]") for i, m in enumerate(history)]
    counts = [(m.role, (await count_tokens(engine, m.content, params)).tokens) for m in typed]
    before = sum(n for _, n in counts)
    system = sum(n for role, n in counts if role == "system")
    asked = (await count_tokens(engine, question, params)).tokens
    whole = [await count_tokens(engine, document_block(d), params) for d in documents]
    limit = whole[0].context_limit if whole else (await engine.count_tokens("", params)).context_limit
    free = limit - reply_room(params.max_tokens, limit) - before - asked - TEMPLATE_SLACK
    turn = Turn("", [], 0, context_limit=limit)
    free = _whole_or_indexed(turn, documents, whole, free, indexes)
    # Passages may take up to half the window past the system prompt: the engine then drops the oldest
    # turns to fit (engine/context/policy.py), so a follow-up's new passages beat old ones.
    free = max(free, (limit - reply_room(params.max_tokens, limit) - system - asked - TEMPLATE_SLACK) // 2)
    sent = "\n".join(m.content for m in typed if m.role == "user")
    for index in indexes:  # every question picks its own passages, less those the history already holds
        item, refs = await _fit(engine, index, question, max(0, free) // len(indexes), params, sent)
        if item.text:
            turn.attachments.append(item)
            turn.references += [f"{index.name}: {r}" for r in refs]
            turn.document_tokens += (await engine.count_tokens(document_block(item), params)).tokens
    turn.content = message_content(question, turn.attachments)
    return turn


def _whole_or_indexed(
    turn: Turn, documents: list[Attachment], whole: list[TokenCount], free: int, indexes: list[Index]
) -> int:
    """In the order attached, each document whole while it fits in the tokens still `free`, else
    indexed for its passages, with a line saying so; returns the tokens still free."""
    for d, w in zip(documents, whole, strict=True):
        if w.tokens <= free:
            turn.attachments.append(d)
            turn.document_tokens += w.tokens
            free -= w.tokens
            continue
        indexes.append(index_of(d.name, d.text, d.kind, d.size, d.sha256))
        turn.notes.append(
            f"{d.name} is too big for the context ({w.tokens:,} tokens, {max(free, 0):,} free"
            f" of {turn.context_limit:,}): sending the passages most related to each question"
        )
    return free


async def _fit(
    engine: EngineAPI, index: Index, question: str, tokens: int, params: GenerationParams, sent: str = ""
) -> tuple[Attachment, list[str]]:
    """The passages that fit in `tokens`, checked with the engine's count (shrunk until they do)."""
    chars = tokens * CHARS_PER_TOKEN
    for _ in range(6):
        item, refs = index.passages(question, chars, sent)
        if not item.text or (await engine.count_tokens(document_block(item), params)).tokens <= tokens:
            return item, refs
        chars = int(chars * 0.75)
    return Attachment(index.name, "", index.kind, passages=True), []
