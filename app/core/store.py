"""Conversations and messages in SQLite (stdlib sqlite3); no Qt.

Threading: a Store is used from the Qt/asyncio main thread only. sqlite3's
check_same_thread stays on, so a call from another thread fails loudly.

Durability: WAL with synchronous=NORMAL, so every commit survives a crash of the
app (kill -9); a power cut may lose the last second or so of writes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
import sqlite3
import time
import unicodedata
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

from app.core import attachments as attached
from app.core.message_tree import Node, active_path, chosen_versions, same_nodes
from app.core.store_open import (
    APPLICATION_ID,
    WriterLock,
    connect_read_only,
    create_private,
    inspect,
    recovery_path,
    user_error,
    writable,
)
from engine import paths
from engine.errors import ChinwagError


class MessageStatus(StrEnum):
    """A message's state; the values are what the database and JSON exports hold."""

    COMPLETE = "complete"
    STREAMING = "streaming"  # a reply being written (saved as it grows)
    STOPPED = "stopped"  # a reply the user stopped, or cut off by a crash
    FAILED = "failed"  # a reply that ended in an error


class MessageRole(StrEnum):
    """Who wrote a message; the values are what the database, the engine and JSON exports hold."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"


T = TypeVar("T")
P = ParamSpec("P")
log = logging.getLogger(__name__)

DEFAULT_TITLE = "New chat"
TITLE_MAX = 60
STATUSES = tuple(MessageStatus)

# Each entry upgrades the schema by one version; user_version = len(applied).
MIGRATIONS = [
    f"""
    PRAGMA application_id = {APPLICATION_ID};
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        model_id TEXT NOT NULL DEFAULT '',
        settings TEXT NOT NULL DEFAULT '{{}}'
    );
    CREATE INDEX conversations_by_activity ON conversations(updated_at);
    CREATE TABLE messages (
        -- AUTOINCREMENT: an id the window still holds never points at a newer message.
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('complete', 'streaming', 'stopped', 'failed')),
        created_at REAL NOT NULL,
        model_id TEXT NOT NULL DEFAULT '',
        stats TEXT,
        UNIQUE (conversation_id, position)
    );
    CREATE INDEX messages_streaming ON messages(status) WHERE status = 'streaming';
    CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    # 2: reply versions and branches. Messages form a tree (parent_id); among siblings the
    # one with active=1 is shown, so the conversation is the path of active children from
    # the root. position stays unique per conversation: it is now the order of creation.
    # The existing linear chats become single-branch trees, each message the child of the
    # one before it.
    """
    ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE;
    ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
    UPDATE messages SET parent_id = (
        SELECT p.id FROM messages p
        WHERE p.conversation_id = messages.conversation_id AND p.position < messages.position
        ORDER BY p.position DESC LIMIT 1
    );
    CREATE INDEX messages_by_parent ON messages(parent_id);
    """,
    # 3: documents attached to messages (app/core/attachments.py). Releases before this number
    # added the table by inspecting the schema, so an upgraded database may have it already.
    """
    CREATE TABLE IF NOT EXISTS attachments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        text TEXT NOT NULL,
        passages TEXT NOT NULL DEFAULT '',
        UNIQUE (message_id, position)
    );
    CREATE INDEX IF NOT EXISTS attachments_by_message ON attachments(message_id);
    """,
    # 4: the MCP servers switched off in a chat are its setting `tools_off` (deleted, exported and
    # imported with it), no longer app state {conversation id: [servers]} that outlived the chat.
    # The blank chat's choice ("") and the choices of deleted chats are dropped.
    """
    UPDATE conversations SET settings = json_set(
        CASE WHEN json_valid(settings) AND json_type(settings) = 'object' THEN settings ELSE '{}' END,
        '$.tools_off', json(choice.value))
    FROM state, json_each(CASE WHEN json_valid(state.value) AND json_type(state.value) = 'object'
                               THEN state.value ELSE '{}' END) AS choice
    WHERE state.key = 'chat_tools_off' AND choice.key = conversations.id AND choice.type = 'array'
        AND json_array_length(choice.value) > 0;
    DELETE FROM state WHERE key = 'chat_tools_off';
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
BUSY_TIMEOUT_MS = 5000  # sqlite3.connect(timeout=5)
SCRUB_WAIT_MS = 200


LAST = object()  # add_message's default parent: the last message shown


class NotFoundError(ChinwagError):
    """A conversation or message id that is not in the store (e.g. deleted meanwhile)."""


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
    stats: dict[str, Any] | None = None
    parent_id: int | None = None  # the message this one answers or follows; None for the first
    active: bool = True  # the version shown among its siblings
    version: int = 1  # 1-based, among the messages with the same parent (by creation)
    versions: int = 1
    attachments: list[attached.StoredAttachment] = field(default_factory=list)


@dataclass
class Conversation:
    id: str
    title: str
    created_at: float
    updated_at: float
    model_id: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)  # the active path, first to last
    tree: list[Message] = field(default_factory=list)  # every version, by creation; [] = messages


@dataclass
class ConversationSummary:
    id: str
    title: str
    updated_at: float
    model_id: str = ""
    snippet: str = ""  # text around the first match when searching, else ""
    message_count: int = 0


def title_from_message(text: str) -> str:
    """A conversation title from its first user message: its first line of prose, trimmed,
    at most TITLE_MAX characters. A longer line is cut at a word boundary and ends in "…", so
    the title never reads as if the question ended there."""
    lines = [ln for ln in str(text).splitlines() if ln.strip() and not ln.strip().startswith("```")]
    line = _MARKDOWN_LEAD.sub("", lines[0].strip()) if lines else ""
    line = " ".join(line.split())
    if not line:
        return DEFAULT_TITLE
    if len(line) <= TITLE_MAX:
        return line
    room = TITLE_MAX - 1  # the "…"
    cut = line[:room]
    space = cut.rfind(" ")
    if space >= room // 2 and not line[room].isspace():
        cut = cut[:space]  # no word cut in half
    # Do not leave half a grapheme (a combining mark or joiner whose base was cut).
    while cut and (unicodedata.combining(cut[-1]) or cut[-1] in "\u200d\ufe0f"):
        cut = cut[:-1]
    return (cut.rstrip(" ,;:-–—") or line[:room]) + "…"


FORK_SUFFIX = re.compile(r" \(fork(?: \d+)?\)$")


def fork_title(title: str, taken: Collection[str]) -> str:
    """'Title (fork)', then 'Title (fork 2)'...: short, and distinct from the titles `taken`.
    A fork of a fork is numbered from the same base, never 'Title (fork) (fork)'."""
    base = FORK_SUFFIX.sub("", title)
    candidate, n = f"{base} (fork)", 1
    while candidate in taken:
        n += 1
        candidate = f"{base} (fork {n})"
    return candidate


_MARKDOWN_LEAD = re.compile(r"^(#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)+")


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


def _contains(haystack: str | None, needle: str) -> bool:
    # Python's casefold handles non-ASCII case (Ä/ä, Σ/σ) that SQLite's LIKE does not.
    return haystack is not None and needle in haystack.casefold()


def _clean(text: object) -> str:
    """Text SQLite can store: lone surrogates (which UTF-8 cannot encode) become U+FFFD."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _snippet(text: str, needle: str, width: int = 80) -> str:
    """About `width` characters around the first match, cut between words, "…" where cut."""
    flat = " ".join(text.split())
    i = flat.casefold().find(needle)
    if i < 0:
        end = _word_end(flat, width, width // 2)
        return flat[:end] + ("…" if end < len(flat) else "")
    start = max(0, i - width // 3)
    end = min(len(flat), start + width)
    start = max(0, min(start, end - width))
    if start and flat[start - 1] != " ":  # never start inside a word: from the next one (up to the match's)
        space = flat.find(" ", start, i)
        start = space + 1 if space >= 0 else flat.rfind(" ", 0, i) + 1
    end = _word_end(flat, end, i + len(needle))
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")


def _word_end(flat: str, end: int, keep: int) -> int:
    """end moved back to the end of a word, but not before keep."""
    if end >= len(flat) or flat[end] == " ":
        return end
    space = flat.rfind(" ", keep, end)
    return space if space > 0 else end


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
        self._writer: WriterLock | None = None
        self._scrub_pending = False
        self._conn: sqlite3.Connection | None = self._open(read_only)

    # -- opening ---------------------------------------------------------------

    def _open(self, want_read_only: bool) -> sqlite3.Connection:
        folder = self.requested_path.parent
        if folder == paths.data_dir_path():
            paths.data_dir()  # created private (0700), or a one-line error
        else:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ChinwagError(f"cannot create the folder for {self.requested_path}: {e.strerror or e}") from e
        problem, version = inspect(self.requested_path)
        if problem is None and version > SCHEMA_VERSION:
            self.notice = (
                f"conversations are read-only: {self.requested_path} was written by a newer version "
                f"of Chinwag (schema {version}; this one knows {SCHEMA_VERSION}), so nothing in it is changed"
            )
            return self._read_only(self.requested_path)
        if problem is not None:
            self.path = recovery_path(self.requested_path, SCHEMA_VERSION)
            self.notice = (
                f"could not read {self.requested_path} ({problem}); it was left untouched "
                f"and conversations are saved to {self.path.name} beside it"
            )
        if want_read_only and not (problem is None and 0 < version < SCHEMA_VERSION):
            return self._read_only(self.path)  # (an older schema must be migrated first: opened writable)
        if not writable(self.path):
            self.notice = (
                f"conversations are read-only: {self.path} cannot be written here, so nothing in it is changed"
            )
            return self._read_only(self.path)
        try:
            return self._connect_writable()
        except sqlite3.Error as e:
            raise ChinwagError(f"cannot open conversation database {self.path}: {e}") from e

    def _read_only(self, path: Path) -> sqlite3.Connection:
        self.read_only = True
        if not path.exists() or path.stat().st_size == 0:
            # Nothing saved yet: an empty in-memory store, so listing says "none" and writes nothing.
            conn = sqlite3.connect(":memory:", isolation_level=None)
            self._migrate(conn)
            conn.execute("PRAGMA query_only=ON")
        else:
            try:
                conn = connect_read_only(path)
            except sqlite3.Error as e:
                raise ChinwagError(f"cannot read conversation database {path}: {e}") from e
        self._register(conn)
        return conn

    def _connect_writable(self) -> sqlite3.Connection:
        created = create_private(self.path)  # 0600: chats are the user's alone
        conn = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            # Deleted text is overwritten with zeros rather than left in free pages.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute("PRAGMA temp_store=MEMORY")  # no sort spill files with message text
            self._register(conn)
            self._migrate(conn)
            create_private(self.path)  # the WAL and SHM the pragmas made
            self._writer = WriterLock(self.path)
            if self._writer.alone:
                # Whatever was streaming when its (now gone) writer died is no longer streaming.
                if conn.execute("SELECT 1 FROM messages WHERE status='streaming' LIMIT 1").fetchone():
                    conn.execute("UPDATE messages SET status='stopped' WHERE status='streaming'")
                self._writer.share()
        except BaseException:
            conn.close()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            if created and self.path.stat().st_size == 0:
                self.path.unlink(missing_ok=True)  # never leave an empty file named in an error
            raise
        return conn

    @staticmethod
    def _register(conn: sqlite3.Connection) -> None:
        conn.create_function("chinwag_contains", 2, _contains, deterministic=True)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number in range(version, SCHEMA_VERSION):
            # executescript commits first, so wrap each step in its own transaction.
            conn.executescript(f"BEGIN IMMEDIATE; {MIGRATIONS[number]}; PRAGMA user_version = {number + 1}; COMMIT;")

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

    def _write(self) -> _Transaction:
        """A write transaction; refused on a read-only store."""
        if self.read_only:
            raise ChinwagError(f"cannot save changes: {self.notice or 'conversations were opened read-only'}")
        return _Transaction(self._db(), self._after_commit)

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
        conv = Conversation(str(uuid.uuid4()), _clean(title), now, now, model_id or "", dict(settings or {}))
        with self._write() as db:
            db.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at, model_id, settings)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conv.id, conv.title, now, now, conv.model_id, _dumps(conv.settings)),
            )
        return conv

    @_db_errors
    def list_conversations(self, search: str = "") -> list[ConversationSummary]:
        """Newest activity first; with search, only those whose title or text contains it."""
        raw = " ".join(_clean(search or "").split())  # a lone surrogate (from argv bytes) cannot be bound
        needle = raw.casefold()
        count = _SHOWN_COUNT
        if not needle:
            rows = self._db().execute(
                f"SELECT c.id, c.title, c.updated_at, c.model_id, {count}, NULL FROM conversations c"
                " ORDER BY c.updated_at DESC, c.rowid DESC"
            )
            return [ConversationSummary(r[0], r[1], r[2], r[3], "", r[4]) for r in rows]
        if raw.isascii():
            # LIKE runs in C; for ASCII needles its ASCII-only case folding is enough.
            pattern = "%" + _like_escape(raw) + "%"
            test = "{} LIKE :p ESCAPE '\\'"
        else:
            pattern = needle
            test = "chinwag_contains({}, :p)"
        hit = "SELECT m.content FROM messages m WHERE m.conversation_id = c.id AND " + test.format("m.content")
        rows = self._db().execute(
            f"SELECT c.id, c.title, c.updated_at, c.model_id, {count},"
            f" ({hit} ORDER BY m.position LIMIT 1) AS hit FROM conversations c"
            f" WHERE {test.format('c.title')} OR EXISTS ({hit})"
            " ORDER BY c.updated_at DESC, c.rowid DESC",
            {"p": pattern},
        )
        return [
            ConversationSummary(r[0], r[1], r[2], r[3], _snippet(r[5] if r[5] is not None else r[1], needle), r[4])
            for r in rows
        ]

    @_db_errors
    def get_conversation(self, conv_id: str) -> Conversation:
        db = self._db()
        row = db.execute(
            "SELECT id, title, created_at, updated_at, model_id, settings FROM conversations WHERE id=?",
            (conv_id,),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no conversation with id {conv_id}")
        conv = Conversation(row[0], row[1], row[2], row[3], row[4], _loads(row[5]) or {})
        conv.tree = [
            _message(r)
            for r in db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id=? ORDER BY position", (conv_id,)
            )
        ]
        documents = attached.by_message(db, conv_id)
        for m in conv.tree:
            m.attachments = documents.get(m.id, [])
        conv.messages = active_path(conv.tree)
        return conv

    @_db_errors
    def resolve_conversation_id(self, prefix: str) -> str:
        """The id that equals or uniquely starts with prefix (for the CLI)."""
        prefix = str(prefix).strip()
        if not prefix:
            raise ChinwagError("no conversation id given")
        pattern = _like_escape(prefix) + "%"
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
            if not db.execute("UPDATE conversations SET title=? WHERE id=?", (_clean(title), conv_id)).rowcount:
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
        value = _loads(row[0])
        return value if isinstance(value, dict) else {}

    @_db_errors
    def update_settings(self, conv_id: str, settings: dict[str, Any]) -> None:
        """Merge settings into the conversation's; a key set to None is removed."""
        with self._write() as db:
            row = db.execute("SELECT settings FROM conversations WHERE id=?", (conv_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no conversation with id {conv_id}")
            merged = _loads(row[0]) or {}
            for key, value in dict(settings).items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            db.execute("UPDATE conversations SET settings=? WHERE id=?", (_dumps(merged), conv_id))

    @_db_errors
    def delete_conversation(self, conv_id: str) -> None:
        """Delete it and its messages; the text is zeroed on disk, not just unlinked."""
        with self._write() as db:
            if not db.execute("SELECT 1 FROM conversations WHERE id=?", (conv_id,)).fetchone():
                raise NotFoundError(f"no conversation with id {conv_id}")
            ids = [r[0] for r in db.execute("SELECT id FROM messages WHERE conversation_id=?", (conv_id,))]
            _delete_messages(db, ids)
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
            _clean(conv.title),
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
                (new.id, new.title, new.created_at, new.updated_at, new.model_id, _dumps(new.settings)),
            )
            for position, m in enumerate(tree):
                _check_status(m.status)
                if m.parent_id is not None and m.parent_id not in new_ids:
                    raise ChinwagError(f"message {position} of {conv.title!r} follows a message that is not before it")
                cur = db.execute(
                    "INSERT INTO messages (conversation_id, position, role, content, status, created_at, model_id, stats,"
                    " parent_id, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        new.id,
                        position,
                        _clean(m.role),
                        _clean(m.content),
                        m.status,
                        m.created_at,
                        m.model_id or "",
                        _dumps(m.stats) if m.stats is not None else None,
                        new_ids.get(m.parent_id),
                        int(id(m) in chosen),
                    ),
                )
                new_ids[m.id] = _row_id(cur)
                attached.insert(db, _row_id(cur), m.attachments)
            rows = db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE conversation_id=? ORDER BY position", (new.id,)
            )
            new.tree = [_message(r) for r in rows]
            documents = attached.by_message(db, new.id)
            for m in new.tree:
                m.attachments = documents.get(m.id, [])
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
            "",
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
    ) -> Message:
        """Add a message, committed at once, after parent_id (default: the last shown message).
        A message added beside others (same parent) is a new version and becomes the shown one.
        The first user message titles a "New chat". `attachments` (StoredAttachment) are saved
        in the same transaction."""
        _check_status(status)
        content, stats = _clean(content), _stats(stats)
        with self._write() as db:
            row = db.execute("SELECT title FROM conversations WHERE id=?", (conv_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no conversation with id {conv_id}")
            if parent_id is LAST:
                path = active_path(
                    [
                        Node(*r)
                        for r in db.execute(
                            "SELECT id, parent_id, active FROM messages WHERE conversation_id=? ORDER BY position",
                            (conv_id,),
                        )
                    ]
                )
                parent_id = path[-1].id if path else None
            elif (
                parent_id is not None
                and not db.execute(
                    "SELECT 1 FROM messages WHERE id=? AND conversation_id=?", (parent_id, conv_id)
                ).fetchone()
            ):
                raise NotFoundError(f"no message with id {parent_id} in conversation {conv_id}")
            position = db.execute(
                "SELECT coalesce(max(position) + 1, 0) FROM messages WHERE conversation_id=?", (conv_id,)
            ).fetchone()[0]
            now = self._now()
            db.execute("UPDATE messages SET active=0 WHERE conversation_id=? AND parent_id IS ?", (conv_id, parent_id))
            cur = db.execute(
                "INSERT INTO messages (conversation_id, position, role, content, status, created_at, model_id, stats,"
                " parent_id, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (
                    conv_id,
                    position,
                    _clean(role),
                    content,
                    status,
                    now,
                    model_id or "",
                    _dumps(stats) if stats is not None else None,
                    parent_id,
                ),
            )
            versions = db.execute(
                "SELECT count(*) FROM messages WHERE conversation_id=? AND parent_id IS ?", (conv_id, parent_id)
            ).fetchone()[0]
            attached.insert(db, _row_id(cur), attachments)
            title = row[0]
            if (
                role == MessageRole.USER
                and title == DEFAULT_TITLE
                and not db.execute(
                    "SELECT 1 FROM messages WHERE conversation_id=? AND role='user' AND id<>?", (conv_id, cur.lastrowid)
                ).fetchone()
            ):
                title = title_from_message(content)
            db.execute("UPDATE conversations SET updated_at=?, title=? WHERE id=?", (now, title, conv_id))
        return Message(
            _row_id(cur),
            conv_id,
            position,
            _clean(role),
            content,
            status,
            now,
            model_id or "",
            stats,
            parent_id,
            True,
            versions,
            versions,
            list(attachments),
        )

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
        self, msg_id: int, content: str | None = None, status: str | None = None, stats: object = None
    ) -> None:
        """Replace a message's content/status/stats (None = keep). Cheap: call it while streaming."""
        sets, values = [], []
        if content is not None:
            sets.append("content=?")
            values.append(_clean(content))
        if status is not None:
            _check_status(status)
            sets.append("status=?")
            values.append(status)
        if stats is not None:
            sets.append("stats=?")
            values.append(_dumps(_stats(stats)))
        with self._write() as db:
            row = db.execute("SELECT conversation_id FROM messages WHERE id=?", (msg_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no message with id {msg_id}")
            if sets:
                db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id=?", (*values, msg_id))
            db.execute("UPDATE conversations SET updated_at=? WHERE id=?", (self._now(), row[0]))

    @_db_errors
    def get_message(self, msg_id: int) -> Message:
        row = self._db().execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE id=?", (msg_id,)).fetchone()
        if row is None:
            raise NotFoundError(f"no message with id {msg_id}")
        return _message(row)

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
            branch = db.execute(_BRANCH, (msg_id, conv_id)).fetchall()
            _delete_messages(db, [r[0] for r in branch])
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
        return default if row is None else _loads(row[0])

    @_db_errors
    def set_state(self, key: str, value: object) -> None:
        """Any JSON value (last model, last conversation, window geometry...)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                (key, _dumps(value)),
            )


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, conn: sqlite3.Connection, after_commit: Callable[[], None] | None = None) -> None:
        self.conn = conn
        self.after_commit = after_commit

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc_type is None:
            self.conn.execute("COMMIT")
            if self.after_commit is not None:
                self.after_commit()
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
        return False


# A message and every message after it in its own conversation (UNION, not UNION ALL: a hand-edited
# cycle ends). Computed here rather than by ON DELETE CASCADE, which SQLite runs as nested triggers
# (at most 1,000 deep: a longer chat could not be deleted) and which crosses into other chats.
_BRANCH = (
    "WITH RECURSIVE branch(id) AS (SELECT ?1 UNION"
    " SELECT m.id FROM messages m JOIN branch b ON m.parent_id = b.id WHERE m.conversation_id = ?2)"
    " SELECT id FROM branch"
)


def _delete_messages(db: sqlite3.Connection, ids: list[int]) -> None:
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


def _like_escape(text: str) -> str:
    return re.sub(r"([\\%_])", r"\\\1", text)


# How many messages a conversation shows: the path of active children from the root.
_SHOWN_COUNT = (
    "(WITH RECURSIVE shown(id) AS ("
    " SELECT id FROM messages WHERE conversation_id = c.id AND parent_id IS NULL AND active = 1"
    " UNION ALL SELECT m.id FROM messages m JOIN shown s ON m.parent_id = s.id WHERE m.active = 1"
    ") SELECT count(*) FROM shown)"
)
_MESSAGE_COLUMNS = (
    "id, conversation_id, position, role, content, status, created_at, model_id, stats, parent_id, active"
)


def _row_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just added."""
    assert cur.lastrowid is not None
    return cur.lastrowid


def _message(row: tuple[Any, ...]) -> Message:
    return Message(
        row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], _loads(row[8]), row[9], bool(row[10])
    )


def _check_status(status: object) -> None:
    if status not in STATUSES:
        raise ChinwagError(f"unknown message status {status!r} (expected one of {', '.join(STATUSES)})")


def _stats(stats: object) -> Any:
    if stats is not None and dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        stats = dataclasses.asdict(stats)
    return stats


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _loads(text: str | None) -> Any:
    """A stored JSON value; a damaged or hand-edited one reads as absent (and is logged), so
    one bad row cannot make a conversation unopenable."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        log.warning("unreadable JSON in the conversation database (%s): %.80r", e, text)
        return None
