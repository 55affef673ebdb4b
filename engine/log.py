"""Chinwag's log: a rotating `chinwag.log` in the data folder that a user can attach to a bug report.

A `ChinwagError` is the user's problem and is shown as one line. Anything else is a bug in
Chinwag: `report_bug` writes its traceback here and returns the one line to show instead,
which says a bug happened and where the log is. No Qt here; the window and the CLI both use it.
"""

import errno
import io
import logging
import logging.handlers
import os
import stat
import sys
from pathlib import Path
from typing import cast

from engine import paths
from engine.errors import ChinwagError, one_line
from engine.paths import FILE_MODE  # conversations can appear in tracebacks: only the user may read the log

LOG_FILE = "chinwag.log"
LOG_MAX_BYTES = 1 << 20
LOG_BACKUPS = 2
OWN_LOGGERS = ("engine", "app", "chinwag")
LOGGED = "_chinwag_logged"  # set on an exception once its traceback is in the log
FORMAT = "%(asctime)s %(levelname)s %(process)d %(threadName)s %(name)s: %(message)s"

log = logging.getLogger("chinwag")


class _PrivateRotatingHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose files are created 0600, that opens only regular files and
    lets several processes rotate the same log."""

    _complained = False

    def _open(self) -> io.TextIOWrapper:
        # O_NOFOLLOW: a symlink planted as the log is not followed to some other file.
        # O_NONBLOCK: a FIFO planted as the log would block the open until someone read it.
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self.baseFilename, flags, FILE_MODE)
        except OSError as e:
            if e.errno == errno.ENXIO:  # a FIFO with no reader
                raise OSError(errno.ENXIO, f"{self.baseFilename} is a named pipe, not a file") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, f"{self.baseFilename} is not a regular file")
            os.set_blocking(fd, True)
            os.fchmod(fd, FILE_MODE)  # an older log made before this rule
            stream = os.fdopen(fd, self.mode, encoding=self.encoding, errors=self.errors)
            return cast(io.TextIOWrapper, stream)  # self.mode is a text mode ("a")
        except BaseException:
            os.close(fd)
            raise

    def doRollover(self) -> None:
        # Another process may have rotated the log a moment ago: its files are gone or moved.
        try:
            super().doRollover()
        except OSError:
            if self.stream is None:
                self.stream = self._open()

    def handleError(self, record: logging.LogRecord) -> None:
        # Not the stdlib's traceback on stderr for every record: one line, once per process.
        if not _PrivateRotatingHandler._complained:
            _PrivateRotatingHandler._complained = True
            error = sys.exc_info()[1]
            print(f"chinwag: cannot write {self.baseFilename} ({error}); log lines are lost", file=sys.stderr)


_handlers: dict[str, logging.Handler] = {}  # "file" / "stderr" → the handler installed on the root logger


def setup(verbose: bool = False) -> Path | None:
    """Send warnings (and every bug's traceback) to chinwag.log; with verbose, to stderr too.

    Safe to call again (a changed CHINWAG_HOME moves the file). Returns the log path, or
    None when the data folder cannot hold one (then bugs go to stderr only).
    """
    # Chinwag's own notes from INFO up; libraries (httpx, huggingface_hub) only when they warn.
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    path = None
    try:
        path = paths.data_dir() / LOG_FILE
        old = _handlers.get("file")
        if not isinstance(old, logging.FileHandler) or old.baseFilename != str(path.absolute()):
            handler = _PrivateRotatingHandler(
                path, maxBytes=LOG_MAX_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8", delay=False
            )
            handler.setLevel(logging.INFO)
            handler.setFormatter(logging.Formatter(FORMAT))
            _replace("file", handler)
    except (OSError, ChinwagError):
        # No usable data folder: the command itself says so in one line; bugs go to stderr.
        path = None
        _replace("file", None)
    if verbose and "stderr" not in _handlers:
        console = logging.StreamHandler(sys.stderr)
        console.setLevel(logging.INFO)
        console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        _replace("stderr", console)
    return path


def _replace(kind: str, handler: logging.Handler | None) -> None:
    root = logging.getLogger()
    old = _handlers.pop(kind, None)
    if old is not None:
        root.removeHandler(old)
        old.close()
    if handler is not None:
        _handlers[kind] = handler
        root.addHandler(handler)


def log_file_in_use() -> Path | None:
    handler = _handlers.get("file")
    return Path(handler.baseFilename) if isinstance(handler, logging.FileHandler) else None


def bug_message(error: BaseException, where: str) -> str:
    """The one line a user sees for a bug: what failed, and where the traceback is."""
    detail = one_line(f"{type(error).__name__}: {error}")[:200]
    path = log_file_in_use()
    place = f"details are in {path}" if path else "details were printed above"
    return f"a bug in Chinwag stopped {where} ({detail}); {place} — please report it"


def report_bug(error: BaseException, where: str) -> str:
    """Log error with its traceback (to chinwag.log, and stderr if nothing else) and return
    the one line to show the user."""
    if not getattr(error, LOGGED, False):  # once, where it happened (the engine thread), not again
        setup()  # cheap when set up already; follows a changed CHINWAG_HOME
        if log_file_in_use() is None and "stderr" not in _handlers:
            _replace("stderr", logging.StreamHandler(sys.stderr))
        log.error("bug in %s", where, exc_info=(type(error), error, error.__traceback__))
        try:
            setattr(error, LOGGED, True)
        except AttributeError:  # an exception type without a __dict__: logged twice at worst
            pass
    return bug_message(error, where)
