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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from engine import paths
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
    problem, header = _header(path)
    if problem is not None or header is None:
        return problem, 0
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return "not an SQLite database", 0
    pragmas = _pragmas(path)
    if isinstance(pragmas, str):
        return pragmas, 0
    version, app_id, tables, check = pragmas
    if check != "ok":
        return "corrupt: " + " ".join(check.replace("*** in database main ***", "").split())[:160], version
    if tables and app_id != APPLICATION_ID:
        return "not a Chinwag database", version
    if version < 0:
        return f"unknown schema version {version}", version
    return None, version


def _header(path: Path) -> tuple[str | None, bytes | None]:
    """(what is wrong with the file itself, its first 100 bytes: None if it is absent or empty)."""
    try:
        if path.is_dir():
            return "it is a folder", None
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            return f"it is {describe_kind(path.stat().st_mode)}, not a file", None
        if not path.exists() or path.stat().st_size == 0:
            return None, None
        with open(path, "rb") as f:
            return None, f.read(100)
    except OSError as e:
        raise ChinwagError(f"cannot read conversation database {path}: {e.strerror or e}") from e


def _pragmas(path: Path) -> tuple[int, int, int, str] | str:
    """(user_version, application_id, tables, quick_check) of an SQLite file, or why it is corrupt."""
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
        return f"corrupt: {e}"
    finally:
        conn.close()
    return version, app_id, tables, check


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


class Transaction:
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


@dataclass
class Opened:
    """What open_database found: the connection, the file in use and why it is not the usual one."""

    path: Path  # the file in use (a recovery file beside an unreadable one)
    conn: sqlite3.Connection | None = None
    read_only: bool = False
    notice: str = ""  # why the store is read-only or not the usual file; "" if normal
    writer: WriterLock | None = None


Prepare = Callable[[sqlite3.Connection], None]


def open_database(
    requested: Path, want_read_only: bool, schema_version: int, register: Prepare, migrate: Prepare
) -> Opened:
    """The database at `requested`, writable and migrated; or read-only (asked for, a newer schema, a file
    that cannot be written); or a recovery file beside an unreadable one. `register` adds the SQL
    functions, `migrate` runs the migrations."""
    _make_folder(requested)
    opened = Opened(requested)
    problem, version = inspect(requested)
    if problem is None and version > schema_version:
        opened.notice = (
            f"conversations are read-only: {requested} was written by a newer version "
            f"of Chinwag (schema {version}; this one knows {schema_version}), so nothing in it is changed"
        )
        return _read_only(opened, register, migrate)
    if problem is not None:
        opened.path = recovery_path(requested, schema_version)
        opened.notice = (
            f"could not read {requested} ({problem}); it was left untouched "
            f"and conversations are saved to {opened.path.name} beside it"
        )
    if want_read_only and not (problem is None and 0 < version < schema_version):
        return _read_only(opened, register, migrate)  # (an older schema must be migrated first: opened writable)
    if not writable(opened.path):
        opened.notice = (
            f"conversations are read-only: {opened.path} cannot be written here, so nothing in it is changed"
        )
        return _read_only(opened, register, migrate)
    try:
        opened.conn = _connect_writable(opened, register, migrate)
    except sqlite3.Error as e:
        raise ChinwagError(f"cannot open conversation database {opened.path}: {e}") from e
    return opened


def _make_folder(path: Path) -> None:
    folder = path.parent
    if folder == paths.data_dir_path():
        paths.data_dir()  # created private (0700), or a one-line error
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ChinwagError(f"cannot create the folder for {path}: {e.strerror or e}") from e


def _read_only(opened: Opened, register: Prepare, migrate: Prepare) -> Opened:
    opened.read_only = True
    path = opened.path
    if not path.exists() or path.stat().st_size == 0:
        # Nothing saved yet: an empty in-memory store, so listing says "none" and writes nothing.
        conn = sqlite3.connect(":memory:", isolation_level=None)
        migrate(conn)
        conn.execute("PRAGMA query_only=ON")
    else:
        try:
            conn = connect_read_only(path)
        except sqlite3.Error as e:
            raise ChinwagError(f"cannot read conversation database {path}: {e}") from e
    register(conn)
    opened.conn = conn
    return opened


def _connect_writable(opened: Opened, register: Prepare, migrate: Prepare) -> sqlite3.Connection:
    path = opened.path
    created = create_private(path)  # 0600: chats are the user's alone
    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        # Deleted text is overwritten with zeros rather than left in free pages.
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA temp_store=MEMORY")  # no sort spill files with message text
        register(conn)
        migrate(conn)
        create_private(path)  # the WAL and SHM the pragmas made
        opened.writer = WriterLock(path)
        if opened.writer.alone:
            # Whatever was streaming when its (now gone) writer died is no longer streaming.
            if conn.execute("SELECT 1 FROM messages WHERE status='streaming' LIMIT 1").fetchone():
                conn.execute("UPDATE messages SET status='stopped' WHERE status='streaming'")
            opened.writer.share()
    except BaseException:
        conn.close()
        if opened.writer is not None:
            opened.writer.close()
            opened.writer = None
        if created and path.stat().st_size == 0:
            path.unlink(missing_ok=True)  # never leave an empty file named in an error
        raise
    return conn
