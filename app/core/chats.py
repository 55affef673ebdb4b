"""Conversations as the store lists them: titles, search snippets, the shown-message count; no Qt."""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from app.core.messages import Message, clean

DEFAULT_TITLE = "New chat"
TITLE_MAX = 60
# The id of a chat not saved yet (the blank chat before its first message, the terminal's before its first
# turn): the one key for what belongs to it meanwhile (its draft, its tool choice). Never a stored id.
UNSAVED = ""


def is_unsaved(conv_id: str | None) -> bool:
    """True for a chat without an id yet (UNSAVED, or None where a front end holds no chat)."""
    return not conv_id


def chat_key(conv_id: str | None) -> str:
    """The key a chat's things are kept under: its id, or UNSAVED."""
    return conv_id or UNSAVED


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


def contains(haystack: str | None, needle: str) -> bool:
    # Python's casefold handles non-ASCII case (Ä/ä, Σ/σ) that SQLite's LIKE does not.
    return haystack is not None and needle in haystack.casefold()


def snippet(text: str, needle: str, width: int = 80) -> str:
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


def like_escape(text: str) -> str:
    return re.sub(r"([\\%_])", r"\\\1", text)


# How many messages a conversation shows: the path of active children from the root.
SHOWN_COUNT = (
    "(WITH RECURSIVE shown(id) AS ("
    " SELECT id FROM messages WHERE conversation_id = c.id AND parent_id IS NULL AND active = 1"
    " UNION ALL SELECT m.id FROM messages m JOIN shown s ON m.parent_id = s.id WHERE m.active = 1"
    ") SELECT count(*) FROM shown)"
)


def summaries(db: sqlite3.Connection, search: str = "") -> list[ConversationSummary]:
    """Newest activity first; with search, only those whose title or text contains it."""
    raw = " ".join(clean(search or "").split())  # a lone surrogate (from argv bytes) cannot be bound
    needle = raw.casefold()
    count = SHOWN_COUNT
    if not needle:
        rows = db.execute(
            f"SELECT c.id, c.title, c.updated_at, c.model_id, {count}, NULL FROM conversations c"
            " ORDER BY c.updated_at DESC, c.rowid DESC"
        )
        return [ConversationSummary(r[0], r[1], r[2], r[3], "", r[4]) for r in rows]
    if raw.isascii():
        # LIKE runs in C; for ASCII needles its ASCII-only case folding is enough.
        pattern = "%" + like_escape(raw) + "%"
        test = "{} LIKE :p ESCAPE '\\'"
    else:
        pattern = needle
        test = "chinwag_contains({}, :p)"
    hit = "SELECT m.content FROM messages m WHERE m.conversation_id = c.id AND " + test.format("m.content")
    rows = db.execute(
        f"SELECT c.id, c.title, c.updated_at, c.model_id, {count},"
        f" ({hit} ORDER BY m.position LIMIT 1) AS hit FROM conversations c"
        f" WHERE {test.format('c.title')} OR EXISTS ({hit})"
        " ORDER BY c.updated_at DESC, c.rowid DESC",
        {"p": pattern},
    )
    return [
        ConversationSummary(r[0], r[1], r[2], r[3], snippet(r[5] if r[5] is not None else r[1], needle), r[4])
        for r in rows
    ]
