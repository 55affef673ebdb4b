"""Conversations and messages in SQLite (stdlib sqlite3); no Qt.

The Store is the one owner of the database: it opens it (app/core/store_open.py), runs the numbered
migrations (app/core/migrations.py), and reads and writes conversations (app/core/chats.py), messages
with their tool rounds (app/core/messages.py) and their documents (app/core/attachments.py).

Threading: a Store is used from the Qt/asyncio main thread only. sqlite3's
check_same_thread stays on, so a call from another thread fails loudly.

Durability: WAL with synchronous=NORMAL, so every commit survives a crash of the
app (kill -9); a power cut may lose the last second or so of writes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from app.core import attachments as attached
from app.core import migrations
from app.core.chats import (
    DEFAULT_TITLE,
    FORK_SUFFIX,
    TITLE_MAX,
    UNSAVED,
    Conversation,
    ConversationSummary,
    contains,
    fork_title,
    like_escape,
    summaries,
    title_from_message,
)
from app.core.message_tree import Node, active_path, chosen_versions, same_nodes
from app.core.messages import (
    BRANCH,
    MESSAGE_COLUMNS,
    STATUSES,
    Message,
    MessageRole,
    MessageStatus,
    StoredToolResult,
    check_status,
    clean,
    delete_rows,
    dumps,
    insert_row,
    loads,
    message_from_row,
    own_fields,
    read_messages,
    read_tool_fields,
    write_tool_fields,
)
from app.core.migrations import MIGRATIONS, SCHEMA_VERSION
from app.core.store_open import (
    Transaction,
    WriterLock,
    open_database,
    user_error,
)
from engine import paths
from engine.errors import ChinwagError
from engine.types import ChatMessage, Role, ToolCall

# What callers import from here, as before the store was split.
__all__ = [
    "DEFAULT_TITLE",
    "FORK_SUFFIX",
    "LAST",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STATUSES",
    "TITLE_MAX",
    "Conversation",
    "ConversationSummary",
    "Message",
    "MessageRole",
    "MessageStatus",
    "NotFoundError",
    "Store",
    "StoredToolResult",
    "fork_title",
    "title_from_message",
]

T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000  # sqlite3.connect(timeout=5)
SCRUB_WAIT_MS = 200


LAST = object()  # add_message's default parent: the last message shown


class NotFoundError(ChinwagError):
    """A conversation or message id that is not in the store (e.g. deleted meanwhile)."""


def _db_errors(method: Callable[Concatenate[Store, P], T]) -> Callable[Concatenate[Store, P], T]:
    """Turn sqlite environment failures (locked, disk full, I/O, read-only) into one-line
    ChinwagErrors; a programming error (ProgrammingError, a bad statement) stays a bug."""

    def wrapper(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as e:
            error = user_error(e, self.path)
            if error is e:
                raise
            raise error from e

    functools.update_wrapper(wrapper, method)  # not @wraps: its type would hide the signature
    return wrapper


class Store:
    """All of Chinwag's conversations. See docs/ARCHITECTURE.md for the contract.

    read_only: for commands that only read (list, export): never writes, never waits on
    another process's write lock, and works on a database it may not write.
    """

    def __init__(self, path: str | Path | None = None, read_only: bool = False) -> None:
        self.requested_path = Path(path) if path else paths.data_dir_path() / "chinwag.db"
        self.path = self.requested_path  # the file in use (a recovered one if unreadable)
        self.read_only = False
        self.notice = ""  # why the store is read-only or not the usual file; "" if normal
        self._last_now = 0.0
        self._scrub_pending = False
        opened = open_database(self.requested_path, read_only, migrations.SCHEMA_VERSION, self._register, self._migrate)
        self.path, self.read_only, self.notice = opened.path, opened.read_only, opened.notice
        self._writer: WriterLock | None = opened.writer
        self._conn: sqlite3.Connection | None = opened.conn
        assert opened.conn is not None

    @staticmethod
    def _register(conn: sqlite3.Connection) -> None:
        conn.create_function("chinwag_contains", 2, contains, deterministic=True)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        migrations.migrate(conn)

    def close(self) -> None:
        if self._conn is not None:
            if self._scrub_pending:
                self._try_scrub()
            self._conn.close()
            self._conn = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ---------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ChinwagError(f"conversation database {self.path} is closed")
        return self._conn

    def _write(self) -> Transaction:
        """A write transaction; refused on a read-only store."""
        if self.read_only:
            raise ChinwagError(f"cannot save changes: {self.notice or 'conversations were opened read-only'}")
        return Transaction(self._db(), self._after_commit)

    def _after_commit(self) -> None:
        if self._scrub_pending:
            self._try_scrub()

    def _now(self) -> float:
        # Strictly increasing, so "newest activity first" is stable even on coarse clocks.
        self._last_now = max(time.time(), self._last_now + 1e-6)
        return self._last_now

    # -- conversations ---------------------------------------------------------

    @_db_errors
    def create_conversation(
        self, title: str = DEFAULT_TITLE, model_id: str = "", settings: dict[str, Any] | None = None
    ) -> Conversation:
        now = self._now()
        conv = Conversation(str(uuid.uuid4()), clean(title), now, now, model_id or "", dict(settings or {}))
        with self._write() as db:
            db.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, model_id, settings)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conv.id, conv.title, now, now, conv.model_id, dumps(conv.settings)),
            )
        return conv

    @_db_errors
    def list_conversations(self, search: str = "") -> list[ConversationSummary]:
        """Newest activity first; with search, only those whose title or text contains it."""
        return summaries(self._db(), search)

    @_db_errors
    def get_conversation(self, conv_id: str) -> Conversation:
        db = self._db()
        row = db.execute(
            "SELECT id, title, created_at, updated_at, model_id, settings FROM conversations WHERE id=?",
            (conv_id,),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no conversation with id {conv_id}")
        conv = Conversation(row[0], row[1], row[2], row[3], row[4], loads(row[5]) or {})
        conv.tree = read_messages(db, conv_id)
        conv.messages = active_path(conv.tree)
        return conv

    @_db_errors
    def resolve_conversation_id(self, prefix: str) -> str:
        """The id that equals or uniquely starts with prefix (for the CLI)."""
        prefix = str(prefix).strip()
        if not prefix:
            raise ChinwagError("no conversation id given")
        pattern = like_escape(prefix) + "%"
        ids: list[str] = [
            r[0]
            for r in self._db().execute("SELECT id FROM conversations WHERE id LIKE ? ESCAPE '\\' LIMIT 11", (pattern,))
        ]
        if prefix in ids:
            return prefix
        if not ids:
            raise NotFoundError(f"no conversation with id {prefix}")
        if len(ids) > 1:
            many = "more than 10" if len(ids) > 10 else str(len(ids))
            raise ChinwagError(f"conversation id {prefix} is ambiguous: it matches {many} conversations")
        return ids[0]

    @_db_errors
    def rename_conversation(self, conv_id: str, title: str) -> None:
        with self._write() as db:
            if not db.execute("UPDATE conversations SET title=? WHERE id=?", (clean(title), conv_id)).rowcount:
                raise NotFoundError(f"no conversation with id {conv_id}")

    @_db_errors
    def set_model(self, conv_id: str, model_id: str) -> None:
        """The model a conversation last used (shown in the list, restored on open)."""
        with self._write() as db:
            if not db.execute("UPDATE conversations SET model_id=? WHERE id=?", (model_id or "", conv_id)).rowcount:
                raise NotFoundError(f"no conversation with id {conv_id}")

    @_db_errors
    def conversation_settings(self, conv_id: str) -> dict[str, Any]:
        """One conversation's stored settings, without reading its messages."""
        row = self._db().execute("SELECT settings FROM conversations WHERE id=?", (conv_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no conversation with id {conv_id}")
        value = loads(row[0])
        return value if isinstance(value, dict) else {}

    @_db_errors
    def update_settings(self, conv_id: str, settings: dict[str, Any]) -> None:
        """Merge settings into the conversation's; a key set to None is removed."""
        with self._write() as db:
            row = db.execute("SELECT settings FROM conversations WHERE id=?", (conv_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no conversation with id {conv_id}")
            merged = loads(row[0]) or {}
            for key, value in dict(settings).items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            db.execute("UPDATE conversations SET settings=? WHERE id=?", (dumps(merged), conv_id))

    @_db_errors
    def delete_conversation(self, conv_id: str) -> None:
        """Delete it and its messages; the text is zeroed on disk, not just unlinked."""
        with self._write() as db:
            if not db.execute("SELECT 1 FROM conversations WHERE id=?", (conv_id,)).fetchone():
                raise NotFoundError(f"no conversation with id {conv_id}")
            ids = [r[0] for r in db.execute("SELECT id FROM messages WHERE conversation_id=?", (conv_id,))]
            delete_rows(db, ids)
            db.execute("DELETE FROM conversations WHERE id=?", (conv_id,))
        attached.drop_unreferenced(self._db())  # its documents' originals, unless another chat has them
        self._scrub()

    def _scrub(self) -> None:
        # Older copies of the deleted pages live in the WAL until a checkpoint; TRUNCATE
        # copies the zeroed pages into the database and empties the WAL file. Another
        # process reading blocks it: then it is tried again after each write and on close.
        self._scrub_pending = True
        self._try_scrub()

    def _try_scrub(self) -> None:
        db = self._db()
        db.execute(f"PRAGMA busy_timeout={SCRUB_WAIT_MS}")  # wait briefly for readers, never freeze
        try:
            busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        except sqlite3.OperationalError:
            busy = 1
        finally:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        self._scrub_pending = bool(busy)

    @_db_errors
    def insert_conversation(self, conv: Conversation) -> Conversation:
        """Copy conv (with every message version) under a new id in one transaction; for
        import and fork. conv.tree's parent ids may be any ids unique within it (an import's
        indices); without a tree (or one whose shown path is not conv.messages), conv.messages
        are stored as one branch."""
        new = Conversation(
            str(uuid.uuid4()),
            clean(conv.title),
            conv.created_at,
            conv.updated_at,
            conv.model_id or "",
            dict(conv.settings or {}),
        )
        tree = (
            conv.tree
            if conv.tree and same_nodes(active_path(conv.tree), conv.messages)
            else [
                dataclasses.replace(m, id=i, parent_id=i - 1 if i else None, active=True)
                for i, m in enumerate(conv.messages)
            ]
        )
        chosen = chosen_versions(tree)  # exactly one shown version among siblings
        new_ids: dict[int | None, int] = {}
        with self._write() as db:
            db.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, model_id, settings)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (new.id, new.title, new.created_at, new.updated_at, new.model_id, dumps(new.settings)),
            )
            for position, m in enumerate(tree):
                if m.parent_id is not None and m.parent_id not in new_ids:
                    raise ChinwagError(f"message {position} of {conv.title!r} follows a message that is not before it")
                new_ids[m.id] = insert_row(db, new.id, position, m, new_ids.get(m.parent_id), id(m) in chosen)
            new.tree = read_messages(db, new.id)
        new.messages = active_path(new.tree)
        return new

    @_db_errors
    def fork_conversation(self, conv_id: str, msg_id: int) -> Conversation:
        """A new conversation holding the shown path up to and including msg_id."""
        conv = self.get_conversation(conv_id)
        ids = [m.id for m in conv.messages]
        if msg_id not in ids:
            raise NotFoundError(f"no message with id {msg_id} shown in conversation {conv_id}")
        now = self._now()
        taken = {r.title for r in self.list_conversations()}
        fork = Conversation(
            UNSAVED,
            fork_title(conv.title, taken),
            now,
            now,
            conv.model_id,
            conv.settings,
            messages=conv.messages[: ids.index(msg_id) + 1],
        )
        return self.insert_conversation(fork)

    # -- messages --------------------------------------------------------------

    @_db_errors
    def add_message(
        self,
        conv_id: str,
        role: str,
        content: str,
        status: str = MessageStatus.COMPLETE,
        model_id: str = "",
        stats: Any = None,  # a TurnStats or its dict
        parent_id: Any = LAST,  # a message id, None for the first, or LAST
        attachments: Sequence[attached.StoredAttachment] = (),
        tool_calls: Sequence[ToolCall] = (),  # an assistant message's calls
        tool_result: StoredToolResult | None = None,  # a `tool` message's call and outcome
    ) -> Message:
        """Add a message, committed at once, after parent_id (default: the last shown message).
        A message added beside others (same parent) is a new version and becomes the shown one.
        The first user message titles a "New chat". `attachments` (StoredAttachment) and the tool
        round are saved in the same transaction (a tool round passed inside `stats`, as before schema 5,
        is taken out of them)."""
        check_status(status)
        role = clean(role)
        stats, calls, result = own_fields(role, stats, tuple(tool_calls), tool_result)
        with self._write() as db:
            row = db.execute("SELECT title FROM conversations WHERE id=?", (conv_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no conversation with id {conv_id}")
            parent = self._parent(db, conv_id, parent_id)
            position = db.execute(
                "SELECT coalesce(max(position) + 1, 0) FROM messages WHERE conversation_id=?", (conv_id,)
            ).fetchone()[0]
            now = self._now()
            db.execute("UPDATE messages SET active=0 WHERE conversation_id=? AND parent_id IS ?", (conv_id, parent))
            message = Message(0, conv_id, position, role, clean(content), status, now, model_id or "", stats, parent)
            message.attachments, message.tool_calls, message.tool_result = list(attachments), calls, result
            message.id = insert_row(db, conv_id, position, message, parent, True)
            message.version = message.versions = db.execute(
                "SELECT count(*) FROM messages WHERE conversation_id=? AND parent_id IS ?", (conv_id, parent)
            ).fetchone()[0]
            title = row[0]
            if (
                role == MessageRole.USER
                and title == DEFAULT_TITLE
                and not db.execute(
                    "SELECT 1 FROM messages WHERE conversation_id=? AND role='user' AND id<>?", (conv_id, message.id)
                ).fetchone()
            ):
                title = title_from_message(message.content)
            db.execute("UPDATE conversations SET updated_at=?, title=? WHERE id=?", (now, title, conv_id))
        return message

    def append(
        self,
        conv_id: str,
        message: ChatMessage,
        status: str = MessageStatus.COMPLETE,
        model_id: str = "",
        stats: Any = None,
        parent_id: Any = LAST,
        attachments: Sequence[attached.StoredAttachment] = (),
        tool_result: StoredToolResult | None = None,
    ) -> Message:
        """Add a typed message (engine.types.ChatMessage): add_message with its role, content and tool
        round. `content` is the message's own text; its documents go in `attachments`. A `tool` message
        keeps its call id and name (and `tool_result`'s run details, if given)."""
        if message.role == Role.TOOL and tool_result is None:
            tool_result = StoredToolResult(message.tool_call_id, message.name)
        return self.add_message(
            conv_id,
            message.role,
            message.content,
            status,
            model_id,
            stats,
            parent_id,
            attachments,
            message.tool_calls if message.role == Role.ASSISTANT else (),
            tool_result if message.role == Role.TOOL else None,
        )

    def begin_reply(self, conv_id: str, model_id: str, parent_id: Any = LAST) -> Message:
        """An empty assistant message that starts streaming after parent_id, and the model it is
        written by as the conversation's model (the turn driver's and the window's first row of a reply)."""
        reply = self.add_message(
            conv_id, MessageRole.ASSISTANT, "", status=MessageStatus.STREAMING, model_id=model_id, parent_id=parent_id
        )
        self.set_model(conv_id, model_id)
        return reply

    @staticmethod
    def _parent(db: sqlite3.Connection, conv_id: str, parent_id: Any) -> int | None:
        """The parent a new message gets: parent_id, checked, or the last shown message for LAST."""
        if parent_id is LAST:
            nodes = db.execute(
                "SELECT id, parent_id, active FROM messages WHERE conversation_id=? ORDER BY position", (conv_id,)
            )
            path = active_path([Node(*r) for r in nodes])
            return path[-1].id if path else None
        if (
            parent_id is not None
            and not db.execute(
                "SELECT 1 FROM messages WHERE id=? AND conversation_id=?", (parent_id, conv_id)
            ).fetchone()
        ):
            raise NotFoundError(f"no message with id {parent_id} in conversation {conv_id}")
        return int(parent_id) if parent_id is not None else None

    @_db_errors
    def versions(self, msg_id: int) -> list[int]:
        """The ids of msg_id's versions (itself and its siblings), oldest first."""
        row = self._db().execute("SELECT conversation_id, parent_id FROM messages WHERE id=?", (msg_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no message with id {msg_id}")
        return [
            r[0]
            for r in self._db().execute(
                "SELECT id FROM messages WHERE conversation_id=? AND parent_id IS ? ORDER BY position", row
            )
        ]

    @_db_errors
    def select_version(self, msg_id: int) -> None:
        """Show msg_id instead of its siblings; below it, the versions last shown there."""
        with self._write() as db:
            row = db.execute("SELECT conversation_id, parent_id FROM messages WHERE id=?", (msg_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no message with id {msg_id}")
            # Not activity: the chat keeps its place in the list.
            db.execute("UPDATE messages SET active=(id=?) WHERE conversation_id=? AND parent_id IS ?", (msg_id, *row))

    @_db_errors
    def update_message(
        self,
        msg_id: int,
        content: str | None = None,
        status: str | None = None,
        stats: object = None,
        tool_calls: Sequence[ToolCall] | None = None,
        tool_result: StoredToolResult | None = None,
    ) -> None:
        """Replace a message's content/status/stats/tool round (None = keep). Cheap: call it while streaming.
        A tool round passed inside `stats` (as before schema 5) is taken out of them."""
        sets: list[str] = []
        values: list[Any] = []
        if content is not None:
            sets.append("content=?")
            values.append(clean(content))
        if status is not None:
            check_status(status)
            sets.append("status=?")
            values.append(status)
        with self._write() as db:
            row = db.execute("SELECT conversation_id, role FROM messages WHERE id=?", (msg_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no message with id {msg_id}")
            calls = tuple(tool_calls) if tool_calls is not None else None
            if stats is not None:
                stats, old_calls, old_result = own_fields(row[1], stats, (), None)
                sets.append("stats=?")
                values.append(dumps(stats) if stats is not None else None)
                calls, tool_result = calls if calls is not None else (old_calls or None), tool_result or old_result
            if sets:
                db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id=?", (*values, msg_id))
            write_tool_fields(db, msg_id, calls, tool_result)
            db.execute("UPDATE conversations SET updated_at=? WHERE id=?", (self._now(), row[0]))

    @_db_errors
    def get_message(self, msg_id: int) -> Message:
        row = self._db().execute(f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE id=?", (msg_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no message with id {msg_id}")
        message = message_from_row(row)
        read_tool_fields(self._db(), [message])
        return message

    @_db_errors
    def delete_messages_from(self, conv_id: str, msg_id: int) -> None:
        """Delete that message and everything that follows it (its whole branch); a sibling
        version, if any, is shown in its place."""
        with self._write() as db:
            row = db.execute(
                "SELECT parent_id, active FROM messages WHERE id=? AND conversation_id=?", (msg_id, conv_id)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"no message with id {msg_id} in conversation {conv_id}")
            branch = db.execute(BRANCH, (msg_id, conv_id)).fetchall()
            delete_rows(db, [r[0] for r in branch])
            if row[1]:
                db.execute(
                    "UPDATE messages SET active=1 WHERE id=(SELECT max(id) FROM messages"
                    " WHERE conversation_id=? AND parent_id IS ?)",
                    (conv_id, row[0]),
                )
        attached.drop_unreferenced(self._db())
        self._scrub()

    # -- app state -------------------------------------------------------------

    @_db_errors
    def get_state(self, key: str, default: Any = None) -> Any:
        row = self._db().execute("SELECT value FROM state WHERE key=?", (key,)).fetchone()
        return default if row is None else loads(row[0])

    @_db_errors
    def set_state(self, key: str, value: object) -> None:
        """Any JSON value (last model, last conversation, window geometry...)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, dumps(value)),
            )
