"""A stored message: its dataclass, its row in the database, and its tool round's rows; no Qt.

A message's `stats` hold only the turn's figures (tokens, speeds, what was dropped); a reply's tool
calls live in the table tool_calls and a tool result's call, server and outcome in tool_results
(migration 5, app/core/migrations.py). The store reads and writes the typed message of
engine/types.py (`Message.chat_message`, `Store.append`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.core import attachments as attached
from engine.errors import ChinwagError
from engine.types import ChatMessage, Role, ToolCall

log = logging.getLogger(__name__)

# Who wrote a message: engine.types.Role (system, user, assistant, tool), the values the database holds.
MessageRole = Role


class MessageStatus(StrEnum):
    """A message's state; the values are what the database and JSON exports hold."""

    COMPLETE = "complete"
    STREAMING = "streaming"  # a reply being written (saved as it grows)
    STOPPED = "stopped"  # a reply the user stopped, or cut off by a crash
    FAILED = "failed"  # a reply that ended in an error


STATUSES = tuple(MessageStatus)


@dataclass(frozen=True)
class StoredToolResult:
    """What a `tool` message answers and how its call went (None: not recorded, as for a call the terminal
    or the server ran)."""

    tool_call_id: str
    name: str
    server: str = ""
    arguments: str | None = None  # the JSON text the call was made with
    is_error: bool | None = None
    allowed: bool | None = None  # False: the user (or a policy) refused the call
    seconds: float | None = None
    note: str = ""  # what ended the reply here (the round limit, Stop), shown under the result

    def row(self) -> tuple[Any, ...]:
        return (
            self.tool_call_id,
            self.name,
            self.server,
            self.arguments,
            self.is_error,
            self.allowed,
            self.seconds,
            self.note,
        )

    def to_json(self) -> dict[str, Any]:
        """The run's details (beyond the call id and name) as an export writes them; unknown ones left out."""
        values = dataclasses.asdict(self)
        return {k: v for k, v in values.items() if k not in ("tool_call_id", "name") and v not in (None, "")}


@dataclass
class Message:
    id: int
    conversation_id: str
    position: int
    role: str
    content: str
    status: str = MessageStatus.COMPLETE
    created_at: float = 0.0
    model_id: str = ""
    stats: dict[str, Any] | None = None  # the turn's figures only (never its tool round)
    parent_id: int | None = None  # the message this one answers or follows; None for the first
    active: bool = True  # the version shown among its siblings
    version: int = 1  # 1-based, among the messages with the same parent (by creation)
    versions: int = 1
    attachments: list[attached.StoredAttachment] = field(default_factory=list)
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls, as the model made them
    tool_result: StoredToolResult | None = None  # a `tool` message's call and outcome

    def chat_message(self) -> ChatMessage:
        """The typed message as the engine gets it: a user message with its documents' blocks before its text."""
        try:
            role = Role(self.role)
        except ValueError:
            raise ChinwagError(f"message {self.id} has an unknown role {self.role!r:.40}") from None
        if role == Role.TOOL:
            result = self.tool_result
            return ChatMessage(
                role, self.content, (), result.tool_call_id if result else "", result.name if result else ""
            )
        content = attached.message_text(self) if self.attachments else self.content
        return ChatMessage(role, content, self.tool_calls if role == Role.ASSISTANT else ())


TOOL_RESULT_KEYS = ("tool_call_id", "name", "server", "arguments", "is_error", "allowed", "seconds", "note")


def split_tool_fields(
    role: str, stats: dict[str, Any]
) -> tuple[dict[str, Any], tuple[ToolCall, ...], StoredToolResult | None]:
    """(the stats left, the tool calls, the tool result) of stats written the way releases before schema 5 kept
    a tool round. A value of the wrong shape stays in the stats left, so nothing is lost."""
    rest = dict(stats)
    calls: tuple[ToolCall, ...] = ()
    if role == Role.ASSISTANT and "tool_calls" in rest:
        try:
            calls = ChatMessage.from_openai(
                {"role": "assistant", "content": "", "tool_calls": rest["tool_calls"]}
            ).tool_calls
        except (ChinwagError, TypeError, KeyError):
            return rest, (), None
        del rest["tool_calls"]
        return rest, calls, None
    if role != Role.TOOL or not isinstance(rest.get("tool_call_id"), str):
        return rest, (), None
    kinds: dict[str, tuple[type, ...]] = {"arguments": (str,), "is_error": (bool,), "allowed": (bool,), "note": (str,)}
    kinds.update(tool_call_id=(str,), name=(str,), server=(str,), seconds=(int, float))
    taken = {
        key: rest.pop(key)
        for key in TOOL_RESULT_KEYS
        if key in rest and isinstance(rest[key], kinds[key]) and not (key == "seconds" and isinstance(rest[key], bool))
    }
    if "seconds" in taken:
        taken["seconds"] = float(taken["seconds"])
    taken.setdefault("name", "")
    return rest, (), StoredToolResult(**taken)


def tool_result_from_json(value: object, where: str) -> StoredToolResult | None:
    """A tool message's run details from an export (`tool`), or None; a wrong value is a ValueError naming where."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where}.tool is not an object")
    rest, _, result = split_tool_fields(Role.TOOL, {"tool_call_id": "", "name": "", **value})
    wrong = sorted(set(rest) & set(TOOL_RESULT_KEYS))  # a key a newer Chinwag added is ignored
    if wrong:
        raise ValueError(f"{where}.tool.{wrong[0]} {value[wrong[0]]!r:.40} is not what a tool run records")
    return result


# --- rows ------------------------------------------------------------------------------------------------
MESSAGE_COLUMNS = "id, conversation_id, position, role, content, status, created_at, model_id, stats, parent_id, active"
_RESULT_COLUMNS = "call_id, name, server, arguments, is_error, allowed, seconds, note"


def message_from_row(row: tuple[Any, ...]) -> Message:
    stats = loads(row[8])
    return Message(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], stats, row[9], bool(row[10]))


def _result(row: tuple[Any, ...]) -> StoredToolResult:
    flag = [None if v is None else bool(v) for v in (row[4], row[5])]
    return StoredToolResult(row[0], row[1], row[2], row[3], flag[0], flag[1], row[6], row[7])


def read_tool_fields(db: sqlite3.Connection, messages: Iterable[Message]) -> None:
    """Fill in the messages' tool calls and tool results (one query each for a whole conversation)."""
    by_id = {m.id: m for m in messages}
    if not by_id:
        return
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='tool_results'").fetchone() is None:
        # A database before schema 5 opened read-only (it could not be migrated): its rounds are in stats.
        for m in by_id.values():
            if isinstance(m.stats, dict):
                rest, m.tool_calls, m.tool_result = split_tool_fields(m.role, m.stats)
                m.stats = rest if rest != m.stats else m.stats
        return
    ids = (json.dumps(list(by_id)),)
    chosen = "(SELECT value FROM json_each(?))"
    calls: dict[int, list[ToolCall]] = {}
    for r in db.execute(
        f"SELECT message_id, call_id, name, arguments FROM tool_calls WHERE message_id IN {chosen}"
        " ORDER BY message_id, position",
        ids,
    ):
        calls.setdefault(r[0], []).append(ToolCall(r[1], r[2], r[3]))
    for message_id, found in calls.items():
        by_id[message_id].tool_calls = tuple(found)
    for r in db.execute(f"SELECT message_id, {_RESULT_COLUMNS} FROM tool_results WHERE message_id IN {chosen}", ids):
        by_id[r[0]].tool_result = _result(r[1:])


def write_tool_fields(
    db: sqlite3.Connection,
    message_id: int,
    calls: tuple[ToolCall, ...] | None,
    result: StoredToolResult | None,
) -> None:
    """Set a message's tool calls (None: keep them) and its tool result (None: keep it)."""
    if calls is not None:
        db.execute("DELETE FROM tool_calls WHERE message_id=?", (message_id,))
        db.executemany(
            "INSERT INTO tool_calls (message_id, position, call_id, name, arguments) VALUES (?, ?, ?, ?, ?)",
            [(message_id, i, clean(c.id), clean(c.name), clean(c.arguments)) for i, c in enumerate(calls)],
        )
    if result is not None:
        values = tuple(clean(v) if isinstance(v, str) else v for v in result.row())
        db.execute(
            f"INSERT OR REPLACE INTO tool_results (message_id, {_RESULT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, *values),
        )


# A message and every message after it in its own conversation (UNION, not UNION ALL: a hand-edited
# cycle ends). Computed here rather than by ON DELETE CASCADE, which SQLite runs as nested triggers
# (at most 1,000 deep: a longer chat could not be deleted) and which crosses into other chats.
BRANCH = (
    "WITH RECURSIVE branch(id) AS (SELECT ?1 UNION"
    " SELECT m.id FROM messages m JOIN branch b ON m.parent_id = b.id WHERE m.conversation_id = ?2)"
    " SELECT id FROM branch"
)


def delete_rows(db: sqlite3.Connection, ids: list[int]) -> None:
    """Delete exactly these messages, with no cascade: parent links into them are cut first.

    A message elsewhere that followed one of them (only a hand-edited database has one) stays,
    as a first message not shown in place of its chat's own.
    """
    if not ids:
        return
    doomed = "(SELECT value FROM json_each(?1))"
    ids_json = (json.dumps(ids),)
    db.execute(
        f"UPDATE messages SET parent_id=NULL, active=0 WHERE parent_id IN {doomed} AND id NOT IN {doomed}", ids_json
    )
    db.execute(f"UPDATE messages SET parent_id=NULL WHERE id IN {doomed} AND parent_id NOT NULL", ids_json)
    db.execute(f"DELETE FROM messages WHERE id IN {doomed}", ids_json)


# --- whole messages -------------------------------------------------------------------------------------
def own_fields(
    role: str, stats: object, calls: tuple[ToolCall, ...], result: StoredToolResult | None
) -> tuple[Any, tuple[ToolCall, ...], StoredToolResult | None]:
    """(stats, tool calls, tool result) to store: a TurnStats as its dict, and a tool round passed inside
    the stats (the shape releases before schema 5 stored, which callers may still pass) taken out of them."""
    stats = stats_dict(stats)
    if isinstance(stats, dict):
        rest, old_calls, old_result = split_tool_fields(role, stats)
        if rest != stats:
            stats = rest or None
        calls, result = calls or old_calls, result or old_result
    return stats, calls, result


def insert_row(
    db: sqlite3.Connection, conv_id: str, position: int, m: Message, parent_id: int | None, active: bool
) -> int:
    """Insert m (its row, its tool round's rows, its documents) into conv_id; its new id."""
    check_status(m.status)
    stats, calls, result = own_fields(m.role, m.stats, m.tool_calls, m.tool_result)
    cur = db.execute(
        "INSERT INTO messages (conversation_id, position, role, content, status, created_at, model_id, stats,"
        " parent_id, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conv_id,
            position,
            clean(m.role),
            clean(m.content),
            m.status,
            m.created_at,
            m.model_id or "",
            dumps(stats) if stats is not None else None,
            parent_id,
            int(active),
        ),
    )
    assert cur.lastrowid is not None
    write_tool_fields(db, cur.lastrowid, calls, result)
    attached.insert(db, cur.lastrowid, m.attachments)
    return cur.lastrowid


def read_messages(db: sqlite3.Connection, conv_id: str) -> list[Message]:
    """Every message of a conversation (every version), by creation, with its documents and tool round."""
    tree = [
        message_from_row(r)
        for r in db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id=? ORDER BY position", (conv_id,)
        )
    ]
    documents = attached.by_message(db, conv_id)
    for m in tree:
        m.attachments = documents.get(m.id, [])
    read_tool_fields(db, tree)
    return tree


# --- values ------------------------------------------------------------------------------------------------
def check_status(status: object) -> None:
    if status not in STATUSES:
        raise ChinwagError(f"unknown message status {status!r} (expected one of {', '.join(STATUSES)})")


def stats_dict(stats: object) -> Any:
    """A TurnStats (or any dataclass) as its dict; a dict or None as it is."""
    if stats is not None and dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        stats = dataclasses.asdict(stats)
    return stats


def clean(text: object) -> str:
    """Text SQLite can store: lone surrogates (which UTF-8 cannot encode) become U+FFFD."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def loads(text: str | None) -> Any:
    """A stored JSON value; a damaged or hand-edited one reads as absent (and is logged), so
    one bad row cannot make a conversation unopenable."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        log.warning("unreadable JSON in the conversation database (%s): %.80r", e, text)
        return None
