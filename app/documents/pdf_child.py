"""The PDF reader's child process: pypdfium2 runs here, never in the app, so a PDF built to exhaust memory
or time costs a process that is stopped, not the app (app/documents/pdf.py starts it and holds the limits).

Run as `python -m app.documents.pdf_child PAGE_BYTES PAGE_CHARS SIZE`: a fresh interpreter (the spawn start
method's way, the same on macOS and Linux), reading SIZE bytes of PDF from stdin and writing framed
messages to stdout (`KIND` byte, 4-byte big-endian length, payload). Imports only the standard library
and pypdfium2. A watchdog thread ends the process (EXIT_MEMORY) once its peak memory passes the
document's own plus PAGE_BYTES; on Linux an address-space limit backs it up.
"""

import json
import os
import resource
import struct
import sys
import threading
import time
import traceback

READY, PAGES, PAGE, ERROR, BUG = b"R", b"N", b"P", b"E", b"B"
EXIT_MEMORY = 86  # the watchdog's exit: the page being read passed the memory limit
_POLL_SECONDS = 0.01


def _peak_bytes() -> int:
    """This process's peak resident memory. On Linux VmHWM: ru_maxrss is kept across exec, so it would start
    at the app's own peak and a page could take that much more before the watchdog saw it."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


class _Watchdog:
    """Ends the process when the peak memory passes `ceiling`, or when the app that started it is gone."""

    def __init__(self) -> None:
        self.ceiling = 0
        self.parent = os.getppid()
        threading.Thread(target=self._run, name="pdf-watchdog", daemon=True).start()

    def _run(self) -> None:
        while True:
            if self.ceiling and _peak_bytes() > self.ceiling:
                os._exit(EXIT_MEMORY)
            if os.getppid() != self.parent:
                os._exit(0)
            time.sleep(_POLL_SECONDS)


def _limit_address_space(extra: int) -> None:
    """Linux only: allocations past the current size plus `extra` fail (pdfium then stops the process)."""
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        wanted = size + extra
        resource.setrlimit(resource.RLIMIT_AS, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    except (OSError, ValueError):  # macOS has no /proc and does not enforce RLIMIT_AS: the watchdog alone
        pass


def _send(kind: bytes, payload: bytes = b"") -> None:
    view = memoryview(kind + struct.pack(">I", len(payload)) + payload)
    while view:
        view = view[os.write(1, view) :]


def _error(kind: str, page: int = 0, count: int = 0) -> None:
    _send(ERROR, json.dumps({"kind": kind, "page": page, "count": count}).encode())


def _read_stdin(size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(page_bytes: int, page_chars: int, size: int, watchdog: _Watchdog) -> None:
    import pypdfium2 as pdfium

    _send(READY)
    data = _read_stdin(size)
    _limit_address_space(2 * page_bytes + (256 << 20))
    watchdog.ceiling = _peak_bytes() + page_bytes  # opening: the document's own structures
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        return _error("password" if "password" in str(e).lower() else "unreadable")
    count = len(pdf)
    _send(PAGES, struct.pack(">I", count))
    watchdog.ceiling = _peak_bytes() + page_bytes  # each page: what the open document holds, plus one page
    for i in range(count):
        try:
            page = pdf[i]
            textpage = page.get_textpage()
            chars = textpage.count_chars()
            if chars > page_chars:
                return _error("chars", i + 1, chars)
            text = textpage.get_text_range()
            textpage.close()
            page.close()
        except pdfium.PdfiumError:
            return _error("page", i + 1)
        _send(PAGE, text.encode("utf-8", "surrogatepass"))


def main(argv: list[str]) -> int:
    watchdog = _Watchdog()
    page_bytes, page_chars, size = (int(a) for a in argv)
    sys.stdout = sys.stderr  # stdout carries the messages only
    try:
        _read(page_bytes, page_chars, size, watchdog)
    except MemoryError:  # the address-space limit, met in Python
        os._exit(EXIT_MEMORY)
    except BrokenPipeError:  # the app stopped listening: nobody to tell
        os._exit(0)
    except Exception:  # noqa: BLE001 - a bug here: its traceback goes to the app, which logs it
        _send(BUG, traceback.format_exc().encode("utf-8", "replace"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
