"""`chinwag` with no subcommand: the desktop window.

Order matters for a fast start: Qt and the window first (painted before anything
heavy), then the engine thread starts and imports MLX while the window is already
usable, and the last used model loads in the background with progress shown.
"""

import asyncio
import gc
import os
import sys
from pathlib import Path

from engine.errors import ChinwagError
from engine.log import report_bug

WINDOW_LOCK = "window.lock"


class WindowLock:
    """Held by the one window open on a data folder: two windows would each think they own
    every chat (streaming repairs, settings, the last conversation)."""

    def __init__(self, folder: Path):
        import fcntl

        from engine.paths import FILE_MODE

        self.path = Path(folder) / WINDOW_LOCK
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as e:
            raise ChinwagError(f"cannot open {self.path}: {e.strerror or e}") from e
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise ChinwagError(f"Chinwag is already open on the data folder {folder}: "
                               "use that window (one window per data folder)") from None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def run_app(argv=None, model: str | None = None) -> int:
    """Show the window and run the Qt/asyncio loop until it closes; returns the exit code.

    argv: arguments after the program name, as argparse takes them (Qt options allowed).
    model: a model to load instead of the last used one.
    """
    from PySide6.QtCore import QEvent, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    import qasync

    from engine import log, paths

    log.setup()
    qt_argv = [sys.argv[0] if sys.argv and sys.argv[0] else "chinwag"] + list(argv or [])
    app = QApplication.instance() or QApplication(qt_argv)
    app.setApplicationName("Chinwag")
    app.setApplicationDisplayName("Chinwag")
    app.setOrganizationName("Chinwag")
    app.setDesktopFileName("chinwag")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    from app.store import Store

    try:
        lock = WindowLock(paths.data_dir())
    except ChinwagError as e:
        print(f"chinwag: error: {e}", file=sys.stderr)
        QMessageBox.information(None, "Chinwag", str(e))  # the loop has not started: modal is fine
        return 2
    try:
        store = Store()
    except ChinwagError as e:
        # Not inside a coroutine: the loop has not started, so a modal box is fine here.
        QMessageBox.critical(None, "Chinwag", f"Chinwag cannot open its conversations:\n{e}")
        lock.release()
        return 1

    from app.window import MainWindow

    window = MainWindow(store)
    previous_hook = _show_bugs_in(window)
    window.show()
    window.repaint()  # painted now, before the engine (and mlx) is even imported
    app.processEvents()
    # The engine starts once the loop runs: its thread imports mlx, the model loads after.
    QTimer.singleShot(0, lambda: window.start_engine(model))  # noqa: F821 (runs long before `del window`)

    code = 0
    with loop:
        code = loop.run_forever() or 0
        try:
            loop.run_until_complete(window.shutdown())
        except Exception as e:  # closing must not hide the window's own exit code
            report_bug(e, "closing the window")
        # Delete the window here, on the GUI thread: left to the garbage collector it could
        # be collected on another thread (the engine's), which Qt does not allow.
        sys.excepthook = previous_hook  # drop the hook's reference to the window first
        window.deleteLater()
        app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        del window
        gc.collect()
    # qasync's loop keeps Qt timers for cancelled handles; free it here, on this thread.
    del loop
    gc.collect()
    store.close()
    lock.release()
    return int(code)


def _show_bugs_in(window):
    """An exception escaping a Qt slot is a bug: its traceback to the log, one line as a banner."""
    previous = sys.excepthook

    def hook(kind, error, tb):
        if not issubclass(kind, Exception):
            return previous(kind, error, tb)
        try:
            window.show_error(report_bug(error.with_traceback(tb), "the window"))
        except RuntimeError:  # the window is already gone
            pass

    sys.excepthook = hook
    return previous


def main():
    sys.exit(run_app(sys.argv[1:]))


if __name__ == "__main__":
    main()
