"""The conversation database's schema: one numbered list of migrations, and the one function that runs them.

Each entry upgrades the schema by one version (PRAGMA user_version = how many ran), in its own
transaction: SQL text, or a Python function for a step that reads JSON row by row. A released entry
never changes; a new schema is a new entry at the end.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from app.core.messages import dumps, loads, split_tool_fields, write_tool_fields
from app.core.store_open import APPLICATION_ID


def _tool_rounds_out_of_stats(db: sqlite3.Connection) -> None:
    """5: a reply's tool calls, and a tool result's call, server and outcome, leave the message's stats
    (a schemaless bag) for their own tables; stats keep only the turn's figures. A value of the wrong
    shape (a hand-edited row) stays in stats, so nothing is lost."""
    # One statement per execute: executescript would commit the migration's transaction.
    db.execute(
        """
        CREATE TABLE tool_calls (
            message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            call_id TEXT NOT NULL,
            name TEXT NOT NULL,
            arguments TEXT NOT NULL,
            PRIMARY KEY (message_id, position)
        )"""
    )
    db.execute(
        """
        CREATE TABLE tool_results (
            message_id INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
            call_id TEXT NOT NULL,
            name TEXT NOT NULL,
            server TEXT NOT NULL DEFAULT '',
            arguments TEXT,
            is_error INTEGER,
            allowed INTEGER,
            seconds REAL,
            note TEXT NOT NULL DEFAULT ''
        )"""
    )
    rows = db.execute("SELECT id, role, stats FROM messages WHERE stats IS NOT NULL").fetchall()
    for message_id, role, text in rows:
        stats = loads(text)
        if not isinstance(stats, dict):
            continue  # unreadable: left as it is (it reads as no stats)
        rest, calls, result = split_tool_fields(str(role), stats)
        if rest == stats:
            continue
        write_tool_fields(db, message_id, calls, result)
        db.execute("UPDATE messages SET stats=? WHERE id=?", (dumps(rest) if rest else None, message_id))


# Each entry upgrades the schema by one version; user_version = len(applied).
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
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
    # 5: tool rounds in their own tables (above).
    _tool_rounds_out_of_stats,
]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(
    conn: sqlite3.Connection, migrations: list[str | Callable[[sqlite3.Connection], None]] | None = None
) -> None:
    """Run the migrations the database has not had, each in its own transaction (None: MIGRATIONS)."""
    steps = MIGRATIONS if migrations is None else migrations
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    for number in range(version, len(steps)):
        step = steps[number]
        if isinstance(step, str):
            # executescript commits first, so each step is wrapped in its own transaction.
            conn.executescript(f"BEGIN IMMEDIATE; {step}; PRAGMA user_version = {number + 1}; COMMIT;")
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            step(conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
