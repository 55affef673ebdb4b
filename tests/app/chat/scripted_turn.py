"""One scripted turn that every front end runs through the turn driver (app/chat/turn.py): a question
with a document attached; the model (the tiny tools model, its first reply forced) calls the real
calculator MCP server's `add`; the result goes back; the model answers. `check` is the one account
of what must reach the engine and what must land in the store, whichever front end ran it."""

from dataclasses import replace

from app.core.document_block import Attachment, message_content
from engine import Engine
from engine.types import ChatMessage, TurnOrigin
from tests.app.tools.scripted import Script

QUESTION = "What is 2 plus 3? The notes say."
DOCUMENT = Attachment("notes.txt", "Two plus three is a sum the calculator does.", "text")
RESULT = "5.0"  # the calculator server's answer to add(2, 3)


def write_document(folder) -> str:
    path = folder / DOCUMENT.name
    path.write_text(DOCUMENT.text, encoding="utf-8")
    return str(path)


class ScriptedEngine(Engine):
    """The real engine, every turn recorded as it got it; the first turn's tokens are forced (the call)."""

    def __init__(self, forced, **options):
        super().__init__(**options)
        self.scripts = [list(forced)]
        self.seen: list[list[ChatMessage]] = []  # each turn's messages, typed
        self.origins: list[TurnOrigin] = []  # each turn's front end, as the engine announces it

    def chat(self, conversation_id, messages, params=None, origin=TurnOrigin.SCRIPT):
        self.seen.append([ChatMessage.from_openai(m) for m in messages])
        self.origins.append(origin)
        if self.scripts and params is not None:
            params = replace(params, logits_processors=(Script(self.scripts.pop(0)),), speculative=False)
        return super().chat(conversation_id, messages, params, origin)


def wire(m: ChatMessage) -> tuple:
    """What of a message the local engine reads: role, text, and which call a result answers."""
    return (str(m.role), m.content, m.tool_call_id)


def check_engine(seen: list[list[ChatMessage]], call_id: str) -> None:
    """The scripted turn reached the engine as two turns: the question, then the call and its result."""
    user = ("user", message_content(QUESTION, [DOCUMENT]), "")
    assert [wire(m) for m in seen[0]] == [user]
    assert len(seen) == 2, [[wire(m) for m in turn] for turn in seen]
    call_text = seen[1][1].content
    assert call_text.startswith("<tool_call>") and '"add"' in call_text
    assert call_id and [wire(m) for m in seen[1]] == [user, ("assistant", call_text, ""), ("tool", RESULT, call_id)]


def check(seen: list[list[ChatMessage]], rows) -> None:
    """What reached the engine (check_engine), and the four messages the store holds."""
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant"]
    asked, called, result, answer = rows
    call_id = called.tool_calls[0].id
    check_engine(seen, call_id)
    assert asked.content == QUESTION and [a.name for a in asked.attachments] == [DOCUMENT.name]
    assert called.content == seen[1][1].content and called.status == "complete"
    assert called.tool_calls[0].name == "add" and called.stats["finish_reason"] == "tool_calls"
    assert "tool_calls" not in called.stats  # stats only for stats: the calls have their own table
    assert (result.content, result.tool_result.tool_call_id, result.tool_result.name) == (RESULT, call_id, "add")
    assert answer.status == "complete" and answer.stats["generated_tokens"] >= 1
