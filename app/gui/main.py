"""`chinwag` with no subcommand: the desktop window.

Order matters for a fast start: Qt and the window first (painted before anything
heavy), then the engine thread starts and imports MLX while the window is already
usable, and the last used model loads in the background with progress shown.
"""

import asyncio
import gc
import sys

from app.gui.single_instance import WINDOW_LOCK, WindowLock, ask_window_to_raise, serve_raise_requests
from engine.errors import ChinwagError
from engine.log import report_bug


def run_app(argv=None, model: str | None = None) -> int:
    """Show the window and run the Qt/asyncio loop until it closes; returns the exit code.

    argv: arguments after the program name, as argparse takes them (Qt options allowed).
    model: a model to load instead of the last used one.
    """
    from app.gui.platform_check import xcb_problem

    problem = xcb_problem()
    if problem:  # Qt would abort with a long message that does not say what to install
        print(f"chinwag: error: {problem}", file=sys.stderr)
        return 2

    from PySide6.QtCore import QEvent, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    import qasync

    from engine import log, paths

    log.setup()
    qt_argv = [sys.argv[0] if sys.argv and sys.argv[0] else "chinwag"] + list(argv or [])
    app = QApplication.instance() or QApplication(qt_argv)
    assert isinstance(app, QApplication)  # a widgets app: any earlier instance is one too
    app.setApplicationName("Chinwag")
    app.setApplicationDisplayName("Chinwag")
    app.setOrganizationName("Chinwag")
    app.setDesktopFileName("chinwag")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    from app.core.store import Store

    try:
        folder = paths.data_dir()
        lock = WindowLock(folder)
    except ChinwagError as e:
        if "already open" in str(e):
            if ask_window_to_raise(paths.data_dir_path()):
                print(
                    f"chinwag: {paths.data_dir_path()} is open in another window: brought it to the front",
                    file=sys.stderr,
                )
                return 0
            # The lock is held, but no Chinwag window answered: another program holds it.
            e = ChinwagError(
                f"{paths.data_dir_path() / WINDOW_LOCK} is locked, but no Chinwag window answered: "
                "another program holds it (close it, or set CHINWAG_HOME to another folder)"
            )
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

    from app.gui.window import MainWindow

    window = MainWindow(store)
    previous_hook = _show_bugs_in(window)
    raise_server = serve_raise_requests(window, folder)  # a second `chinwag` brings this one forward
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
        except Exception as e:  # noqa: BLE001 - closing must not hide the window's own exit code
            report_bug(e, "closing the window")
        # Delete the window here, on the GUI thread: left to the garbage collector it could
        # be collected on another thread (the engine's), which Qt does not allow.
        sys.excepthook = previous_hook  # drop the hook's reference to the window first
        raise_server.close()
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
