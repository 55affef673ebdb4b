"""One way to write a file: a temp file in the same folder, fsync, then os.replace; and one way to
read a small file Chinwag wrote (`read_capped`), which never blocks on a pipe or reads without end.

A crash leaves the old file or the new one, never half of one. Used by export, the
registry's folder list, the download's ref, and the KV caches that memory.py evicts.
Targets that are not regular files (a FIFO, a device, a folder) are refused; a symlink
is followed to the regular file it names, which is replaced (the link stays).
"""

import contextlib
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

from engine.errors import ChinwagError

TEMP_SUFFIX = ".part"


def describe_kind(mode: int) -> str:
    """'a named pipe', 'a device'...: what a path that is not a regular file is."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class NotAFile(OSError):
    """A path that holds a folder, a named pipe, a device... where a regular file should be."""


def read_capped(path: str | os.PathLike[str], limit: int, follow_links: bool = True) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path` (one more than `limit`: the caller sees
    it is over). Opened without blocking (a named pipe there never holds the read), and with
    `follow_links` False never through a symlink (ELOOP). OSError as opening or reading raises it;
    NotAFile for anything but a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags if follow_links else flags | getattr(os, "O_NOFOLLOW", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotAFile(f"it is {describe_kind(mode)}, not a file")
        data = b""
        while len(data) <= limit and (piece := os.read(fd, limit + 1 - len(data))):
            data += piece
        return data
    finally:
        os.close(fd)


def writable_target(path: str | os.PathLike[str]) -> Path:
    """The regular file to replace for path (a symlink's target); ChinwagError for anything else.

    Checked before any work is done, so a bad target fails fast.
    """
    path = Path(path)
    try:
        target = path
        if path.is_symlink():
            target = path.resolve(strict=False)
            if not os.path.lexists(target):
                raise ChinwagError(f"cannot write {path}: it is a symlink to {target}, which does not exist")
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ChinwagError(f"cannot write {path}: it is {describe_kind(st.st_mode)}, not a regular file")
        if not target.parent.is_dir():
            raise ChinwagError(f"cannot write {path}: folder {target.parent} does not exist")
    except OSError as e:
        raise ChinwagError(f"cannot write {path}: {e.strerror or e}") from e
    except ValueError as e:  # a NUL byte in the name
        raise ChinwagError(f"cannot write {str(path)!r}: {e}") from e
    return target


def _default_mode(target: Path) -> int:
    """Keep a replaced file's mode; a new file gets the usual umask mode."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], mode: int | None = None) -> Iterator[Path]:
    """Yield a temp path beside path's target; on success it replaces the target atomically.

    mode: the file's permissions (None keeps a replaced file's, or the umask default).
    OSError becomes a one-line ChinwagError; the temp file never survives a failure.
    """
    target = writable_target(path)
    # Short prefix: the temp name must fit even when the target's name is near the limit.
    tmp = target.with_name(f".{target.name[:40]}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}{target.suffix}")
    final_mode = _default_mode(target) if mode is None else mode
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, final_mode)
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise ChinwagError(f"cannot write {path}: {e.strerror or e}") from e
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str, mode: int | None = None) -> Path:
    """Write data (str as UTF-8) to path atomically; returns the file written (a symlink's target)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    target = writable_target(path)
    with replacing(target, mode) as tmp:
        # O_EXCL with 0600: nobody else can open the temp file between create and chmod.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return target
