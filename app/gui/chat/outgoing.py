"""A message on its way out of the window: where it goes, and its documents planned by the one
planner (app/documents/turn.py `prepare`, through app/chat/documents.py), as the terminal plans them.

The draft is planned when typing pauses or a document is ready: the tray shows that plan and the
engine reads it ahead; the message is planned again when it is sent (the same question, history and
documents give the same plan, so what was read ahead is a prefix of what is sent)."""

from dataclasses import dataclass
from typing import Any

from app.chat.documents import chat_indexes, whole_texts
from app.core.attachments import StoredAttachment
from app.core.document_block import Attachment, message_content
from app.core.settings import effective, engine_messages, load_defaults
from app.core.store import LAST, Message, Store
from app.documents.turn import Turn, prepare
from engine.protocol import EngineAPI
from engine.types import ChatMessage, GenerationParams


@dataclass
class Target:
    """Where a message goes: its chat, the message it follows (LAST, or an edited message's parent)
    and, for an edit, the message it replaces."""

    conv_id: str
    parent: Any = LAST
    replaced: int | None = None
    new_chat: bool = False
    first: bool = False  # the chat's first message (it titles the chat)


@dataclass
class Chat:
    """The messages a new message follows, with the chat's settings (the system prompt in them)."""

    history: list[Message]
    values: dict[str, Any]

    @property
    def system_prompt(self) -> str:
        return str(self.values.get("system_prompt") or "")

    def engine_messages(self) -> list[ChatMessage]:
        messages = engine_messages(self.history, self.system_prompt)
        return [ChatMessage.from_openai(m, f"messages[{i}]") for i, m in enumerate(messages)]


def chat_before(store: Store, conv_id: str | None, replaced: int | None = None) -> Chat:
    """The chat as a new message sees it (a new chat: empty; an edit: what came before the edited message)."""
    conv = store.get_conversation(conv_id) if conv_id is not None else None
    history = list(conv.messages) if conv is not None else []
    ids = [m.id for m in history]
    if replaced is not None and replaced in ids:
        history = history[: ids.index(replaced)]
    return Chat(history, effective(conv.settings if conv else None, load_defaults(store)))


def needs_plan(chat: Chat, documents: list[Attachment]) -> bool:
    """Documents attached, or earlier ones sent as passages (a follow-up gets its own)."""
    return bool(documents) or any(a.passages for m in chat.history for a in m.attachments)


async def plan(
    engine: EngineAPI, chat: Chat, question: str, documents: list[Attachment], params: GenerationParams
) -> Turn:
    """The message's content and documents, planned as every front end plans them."""
    return await prepare(engine, chat.engine_messages(), question, documents, params, chat_indexes(chat.history))


def stored(turn: Turn, chat: Chat, documents: list[Attachment]) -> list[StoredAttachment]:
    """What the store keeps of a planned message's documents: the whole texts beside the passages."""
    return turn.stored(whole_texts(chat.history, documents))


def draft_content(turn: Turn, question: str) -> str:
    """What the engine reads ahead of a draft: as planned; with no question yet, only the documents
    that go whole (passages are picked for a question)."""
    if question.strip():
        return turn.content
    return message_content(question, [a for a in turn.attachments if not a.passages])
