"""A PDF's text, page by page, read by pypdfium2 in a child process (app/documents/pdf_child.py) under the
bounds of app/documents/limits.py: what one page may cost in memory, time and characters.

A page built to inflate (nested form XObjects drawing each other, a content stream of hundreds of
megabytes) makes pdfium build gigabytes before any text comes back; in the child that costs a process
that is stopped and a line naming the file and the page, not the app's memory.
"""

import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.core.sizes import format_bytes
from app.documents import limits
from engine.errors import ChinwagError

_CHILD = Path(__file__).with_name("pdf_child.py")
# Kept in step with pdf_child.py (which imports nothing of the app).
_READY, _PAGES, _PAGE, _ERROR, _BUG = b"R", b"N", b"P", b"E", b"B"
_EXIT_MEMORY = 86


class _Stopped(Exception):
    """The child ended without a message: `code` is its exit status (negative: the signal)."""

    def __init__(self, code: int) -> None:
        self.code = code


class _Child:
    """The reader process and its framed messages (`KIND`, 4-byte big-endian length, payload)."""

    def __init__(self, data: bytes) -> None:
        args = [str(limits.PDF_PAGE_BYTES), str(limits.PDF_PAGE_CHARS), str(len(data))]
        # -I: the child imports only the standard library and pypdfium2, never a module from the working folder.
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl+C in the terminal is the app's to handle, not the reader's
        )
        self._buffer = bytearray()
        threading.Thread(target=self._write, args=(data,), name="pdf-reader-input", daemon=True).start()

    def _write(self, data: bytes) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            stdin.close()
        except (BrokenPipeError, ValueError, OSError):  # the child was stopped before it read everything
            pass

    def receive(self, seconds: float) -> tuple[bytes, bytes] | None:
        """The next message, or None when none came within `seconds`; _Stopped when the child ended."""
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + seconds
        while True:
            if len(self._buffer) >= 5:
                (size,) = struct.unpack_from(">I", self._buffer, 1)
                if len(self._buffer) >= 5 + size:
                    kind, payload = bytes(self._buffer[:1]), bytes(self._buffer[5 : 5 + size])
                    del self._buffer[: 5 + size]
                    return kind, payload
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stdout], [], [], left)[0]:
                return None
            chunk = os.read(stdout.fileno(), 1 << 20)
            if not chunk:
                raise _Stopped(self.process.wait())
            self._buffer += chunk

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def read_pages(name: str, data: bytes, progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Each page's text as pdfium gives it; ChinwagError with one line when the file is refused.

    Bounds: opening within PDF_OPEN_SECONDS; each page within PDF_PAGE_SECONDS, PDF_PAGE_BYTES more memory
    than the open document holds, and PDF_PAGE_CHARS characters; all the pages within PDF_TOTAL_SECONDS;
    at most MAX_PDF_PAGES pages and MAX_TEXT_CHARS characters in all."""
    child = _Child(data)
    pages: list[str] = []
    count, chars = -1, 0
    deadline = 0.0  # for all the pages, from the first
    try:
        while count < 0 or len(pages) < count:
            kind, payload = _next_message(child, name, count, len(pages), deadline)
            if kind == _PAGES:
                (count,) = struct.unpack(">I", payload)
                deadline = time.monotonic() + limits.PDF_TOTAL_SECONDS
                if count > limits.MAX_PDF_PAGES:
                    raise ChinwagError(f"{name} has {count:,} pages: the limit is {limits.MAX_PDF_PAGES:,}")
            elif kind == _PAGE:
                pages.append(payload.decode("utf-8", "surrogatepass"))
                chars += len(pages[-1])
                if chars > limits.MAX_TEXT_CHARS:  # stop reading now, not after every page is held
                    raise ChinwagError(f"{name} holds too much text: more than {limits.MAX_TEXT_CHARS:,} characters")
                if progress:
                    progress(len(pages), count)
            elif kind == _ERROR:
                raise ChinwagError(_error_line(name, json.loads(payload)))
            elif kind == _BUG:  # not the file's fault: the caller logs it as a bug, with the child's traceback
                raise RuntimeError("the PDF reader failed:\n" + payload.decode("utf-8", "replace"))
        return pages
    finally:
        child.stop()


def _next_message(child: _Child, name: str, count: int, read: int, deadline: float) -> tuple[bytes, bytes]:
    """The child's next message in the time left (opening while `count` < 0, else page `read` + 1 before
    `deadline`); ChinwagError when it is too slow or stops."""
    seconds = limits.PDF_OPEN_SECONDS if count < 0 else limits.PDF_PAGE_SECONDS
    left = seconds if count < 0 else min(seconds, deadline - time.monotonic())
    page = read + 1 if count >= 0 else 0
    try:
        message = child.receive(left)
    except _Stopped as stopped:
        raise ChinwagError(_stopped_line(name, page, stopped.code)) from None
    if message is None and left < seconds:
        raise ChinwagError(_total_line(name, read))
    if message is None:
        raise ChinwagError(_slow_line(name, page, seconds))
    return message


def _error_line(name: str, error: dict[str, Any]) -> str:
    kind, page = error["kind"], error["page"]
    if kind == "password":
        return f"{name} is password-protected"
    if kind == "unreadable":
        return f"{name} is not a readable PDF: it is damaged or incomplete"
    if kind == "chars":
        return (
            f"{name} holds too much text on page {page}: {error['count']:,} characters,"
            f" a page holds at most {limits.PDF_PAGE_CHARS:,} (a PDF bomb?)"
        )
    return f"{name} is damaged: page {page} cannot be read"


def _where(page: int) -> str:
    return f"page {page}" if page else "opening it"


def _slow_line(name: str, page: int, seconds: float) -> str:
    return f"{name} is too costly to read: {_where(page)} took more than {seconds:g} s (a PDF bomb?)"


def _total_line(name: str, read: int) -> str:
    return (
        f"{name} is too costly to read: its pages took more than {limits.PDF_TOTAL_SECONDS:g} s in all"
        f" ({read:,} read, a PDF bomb?)"
    )


def _stopped_line(name: str, page: int, code: int) -> str:
    if code == _EXIT_MEMORY:
        return (
            f"{name} is too costly to read: {_where(page)} needed more than"
            f" {format_bytes(limits.PDF_PAGE_BYTES)} of memory (a PDF bomb?)"
        )
    # Past the address-space limit pdfium cannot allocate and aborts; a damaged file can crash it too.
    return f"{name} cannot be read: the PDF reader stopped at {_where(page)} (a damaged file or a PDF bomb?)"
