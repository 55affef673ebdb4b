"""Opening the conversation database safely: checks, recovery names, read-only, permissions,
the writers' lock, and which SQLite errors are the user's environment rather than a bug.

No Qt. app/core/store.py's Store uses these; several processes (windows, CLI commands) may have
the same database open at once.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path

from engine.atomic import describe_kind
from engine.errors import ChinwagError
from engine.paths import FILE_MODE, private_file

APPLICATION_ID = 0x43687767  # "Chwg": marks the file as ours
SIDE_FILES = ("-wal", "-shm")
WRITERS_SUFFIX = ".writers"

# Primary SQLite result codes that describe the machine, not Chinwag's code: a full disk,
# a read-only or vanished folder, another process holding a lock, a damaged file.
_ENVIRONMENT = {
    3: "PERM",
    5: "BUSY",
    6: "LOCKED",
    7: "NOMEM",
    8: "READONLY",
    10: "IOERR",
    11: "CORRUPT",
    13: "FULL",
    14: "CANTOPEN",
    15: "PROTOCOL",
    23: "AUTH",
    26: "NOTADB",
}


def is_environment_error(e: sqlite3.Error) -> bool:
    """True for disk full, locked, I/O, read-only, corrupt...; False for a programming error."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _ENVIRONMENT
    # No code (older Python, or raised before SQLite ran): only OperationalError is the machine's.
    return type(e) is sqlite3.OperationalError


def user_error(e: sqlite3.Error, path: Path) -> BaseException:
    """A one-line ChinwagError for an environment error; the error itself (a bug) otherwise."""
    if is_environment_error(e):
        return ChinwagError(f"conversation database {path}: {e}")
    return e


def inspect(path: Path) -> tuple[str | None, int]:
    """(problem, user_version): problem is None for a usable (or absent/empty) file.

    A problem is something wrong with the file (then it is left alone and a recovered one is
    used); a machine that cannot read it now (I/O error, locked) raises ChinwagError instead,
    so a healthy database never looks unreadable.
    """
    try:
        if path.is_dir():
            return "it is a folder", 0
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            return f"it is {describe_kind(path.stat().st_mode)}, not a file", 0
        if not path.exists() or path.stat().st_size == 0:
            return None, 0
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as e:
        raise ChinwagError(f"cannot read conversation database {path}: {e.strerror or e}") from e
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return "not an SQLite database", 0
    try:
        conn = connect_read_only(path)
    except sqlite3.Error as e:
        raise ChinwagError(f"cannot read conversation database {path}: {e}") from e
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        check = conn.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as e:
        code = (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF
        if code in _ENVIRONMENT and _ENVIRONMENT[code] not in ("CORRUPT", "NOTADB"):
            raise ChinwagError(f"cannot read conversation database {path}: {e}") from e
        return f"corrupt: {e}", 0
    finally:
        conn.close()
    if check != "ok":
        return "corrupt: " + " ".join(check.replace("*** in database main ***", "").split())[:160], version
    if tables and app_id != APPLICATION_ID:
        return "not a Chinwag database", version
    if version < 0:
        return f"unknown schema version {version}", version
    return None, version


def recovery_path(requested: Path, schema_version: int) -> Path:
    """The newest healthy recovered file beside the original, else a new name (not created)."""
    folder, stem = requested.parent, requested.stem
    for old in sorted(folder.glob(f"{stem}-recovered-*.db"), key=_mtime, reverse=True):
        try:
            problem, version = inspect(old)
        except ChinwagError:
            continue
        if problem is None and 0 <= version <= schema_version:
            return old
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = folder / f"{stem}-recovered-{stamp}.db", 1
    while candidate.exists():
        n += 1
        candidate = folder / f"{stem}-recovered-{stamp}-{n}.db"
    return candidate


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def writable(path: Path) -> bool:
    """Can this process write the database (and create its WAL beside it)?"""
    return os.access(path.parent, os.W_OK | os.X_OK) and (not path.exists() or os.access(path, os.W_OK))


def create_private(path: Path) -> bool:
    """Make the database file (0600) if missing and take group/other access from it and its
    WAL and SHM (SQLite gives those the database file's mode). True if it was created here."""
    created = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        os.close(fd)
        created = True
    except FileExistsError:
        pass
    for p in (path, *(path.with_name(path.name + s) for s in SIDE_FILES)):
        private_file(p)
    return created


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that never writes and never waits on another process's write lock."""
    uri = path.resolve().as_uri()
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=5, isolation_level=None)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        # e.g. a WAL database in a folder we cannot write: read the file as it is.
        conn = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
    conn.execute("PRAGMA query_only=ON")
    return conn


class WriterLock:
    """Held (shared) by every process that has the database open for writing.

    The "streaming → stopped" repair on open is right only when no other writer is alive:
    a live one may be streaming a reply right now. Taking the lock exclusively tells.
    """

    def __init__(self, db_path: Path) -> None:
        import fcntl

        self._fcntl = fcntl
        self.path = db_path.with_name(db_path.name + WRITERS_SUFFIX)
        try:
            self.fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        except OSError as e:
            raise ChinwagError(f"cannot open {self.path}: {e.strerror or e}") from e
        private_file(self.path)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.alone = True
        except BlockingIOError:
            self.alone = False
            self.share()

    def share(self) -> None:
        """Hold the lock shared (after the repair, or waiting out another process's repair)."""
        assert self.fd is not None  # open until close()
        self._fcntl.flock(self.fd, self._fcntl.LOCK_SH)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
            self.fd = None
