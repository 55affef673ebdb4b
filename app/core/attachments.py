"""Documents attached to messages: their table in the conversation database and their original bytes.

The table is made by migration 3 of app/core/store.py (a read-only database of an older schema
may lack it: then no message has documents). A row holds what the message
needs to be rebuilt exactly: the extracted text and, for a document too big for the context,
the passages that were sent instead. Originals live in <data>/attachments/<sha256> (0600),
shared by every message that attached the same bytes, within a disk budget.
"""

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.document_block import Attachment, message_content
from engine import paths
from engine.atomic import write_atomic

_COLUMNS = "name, kind, size, sha256, text, passages"
# Originals kept in <data>/attachments/: the oldest go first past this.
ORIGINALS_BUDGET_BYTES = 2 * 1024 * 1024 * 1024


@dataclass(frozen=True)
class StoredAttachment:
    """One document of one message, as stored and exported."""

    name: str
    kind: str
    size: int
    sha256: str
    text: str  # the whole extracted text
    passages: str = ""  # what was sent instead of the whole text (too big for the context); "" = all of it

    def for_message(self) -> Attachment:
        """The block's input: the passages if those were sent, else the whole text."""
        if self.passages:
            return Attachment(self.name, self.passages, self.kind, passages=True)
        return Attachment(self.name, self.text, self.kind)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("name", "kind", "size", "sha256", "text", "passages")}


def has_table(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='attachments'").fetchone() is not None


def insert(db: sqlite3.Connection, message_id: int, items: Iterable[StoredAttachment]) -> None:
    """Inside the caller's transaction, so a message and its documents are saved together or not at all."""
    for position, a in enumerate(items):
        db.execute(
            f"INSERT INTO attachments (message_id, position, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (message_id, position, a.name, a.kind, int(a.size), a.sha256, a.text, a.passages),
        )


def by_message(db: sqlite3.Connection, conv_id: str) -> dict[int, list[StoredAttachment]]:
    """Every message's documents in one conversation ({} on a database without the table)."""
    if not has_table(db):
        return {}
    out: dict[int, list[StoredAttachment]] = {}
    rows = db.execute(
        f"SELECT a.message_id, {', '.join('a.' + c.strip() for c in _COLUMNS.split(','))} FROM attachments a"
        " JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = ? ORDER BY a.message_id, a.position",
        (conv_id,),
    )
    for row in rows:
        out.setdefault(row[0], []).append(StoredAttachment(*row[1:]))
    return out


def referenced(db: sqlite3.Connection) -> set[str]:
    if not has_table(db):
        return set()
    return {r[0] for r in db.execute("SELECT DISTINCT sha256 FROM attachments")}


# --- originals ---------------------------------------------------------------------------


def originals_dir() -> Path:
    return paths.private_dir(paths.data_dir() / "attachments", "attachments folder")


def original_path(sha256: str) -> Path | None:
    """The kept original of these bytes, or None (never kept, or dropped by the budget)."""
    path = paths.data_dir_path() / "attachments" / sha256
    return path if len(sha256) == 64 and path.is_file() else None


def openable_copy(sha256: str, name: str) -> Path | None:
    """A private copy of the original under its own name (a viewer picks its app by the name), or None."""
    import shutil
    import tempfile

    original = original_path(sha256)
    if original is None:
        return None
    safe = Path(name.replace("\\", "/")).name.strip(". ") or "document"
    copy = Path(tempfile.mkdtemp(prefix="chinwag-open-")) / safe  # 0700, only ours
    shutil.copyfile(original, copy)
    copy.chmod(paths.FILE_MODE)
    return copy


def keep_original(sha256: str, data: bytes, budget: int | None = None) -> Path:
    """Store the bytes under their hash (0600), then drop the oldest originals past the budget."""
    folder = originals_dir()
    path = folder / sha256
    if not path.exists():
        write_atomic(path, data, mode=paths.FILE_MODE)
    _enforce_budget(folder, ORIGINALS_BUDGET_BYTES if budget is None else budget, keep=path)
    return path


def _enforce_budget(folder: Path, budget: int, keep: Path) -> None:
    files = []
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False) and len(entry.name) == 64:
            info = entry.stat(follow_symlinks=False)
            files.append((info.st_mtime, info.st_size, Path(entry.path)))
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= budget:
            break
        if path != keep:
            path.unlink(missing_ok=True)  # the text stays in the database; only "open the original" is lost
            total -= size


def drop_unreferenced(db: sqlite3.Connection) -> int:
    """Erase originals no message refers to any more (after a chat or a message was deleted)."""
    folder = paths.data_dir_path() / "attachments"
    if not folder.is_dir():
        return 0
    used, dropped = referenced(db), 0
    for entry in os.scandir(folder):
        if len(entry.name) == 64 and entry.name not in used and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            dropped += 1
    return dropped


def message_text(message: Any) -> str:  # a store Message (or anything with content and attachments)
    """What the engine gets for a stored message: its documents' blocks, then its text."""
    return message_content(message.content, [a.for_message() for a in getattr(message, "attachments", ())])


def from_json(value: object, where: str) -> list[StoredAttachment]:
    """A message's "attachments" in a JSON export; ValueError naming `where` if malformed."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}.attachments is not a list")
    out = []
    for i, item in enumerate(value):
        here = f"{where} attachment {i}"
        if not isinstance(item, dict):
            raise ValueError(f"{here} is not an object")
        try:
            out.append(
                StoredAttachment(
                    _typed(item, "name", str, here),
                    _typed(item, "kind", str, here, "text"),
                    _typed(item, "size", int, here, 0),
                    _typed(item, "sha256", str, here, ""),
                    _typed(item, "text", str, here),
                    _typed(item, "passages", str, here, ""),
                )
            )
        except KeyError as e:
            raise ValueError(f"{here} has no {e.args[0]!r}") from None
    return out


def _typed(item: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in item:
        if default is None:
            raise KeyError(key)
        return default
    value = item[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{where}.{key} is not a {kind.__name__}")
    return value
