"""`chinwag` with no subcommand: the desktop window.

Order matters for a fast start: Qt and the window first (painted before anything
heavy), then the engine thread starts and imports MLX while the window is already
usable, and the last used model loads in the background with progress shown.
"""

import asyncio
import gc
import logging
import sys


def run_app(argv=None, model: str | None = None) -> int:
    """Show the window and run the Qt/asyncio loop until it closes; returns the exit code.

    argv: arguments after the program name, as argparse takes them (Qt options allowed).
    model: a model to load instead of the last used one.
    """
    from PySide6.QtCore import QEvent, QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    import qasync

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    qt_argv = [sys.argv[0] if sys.argv and sys.argv[0] else "chinwag"] + list(argv or [])
    app = QApplication.instance() or QApplication(qt_argv)
    app.setApplicationName("Chinwag")
    app.setApplicationDisplayName("Chinwag")
    app.setOrganizationName("Chinwag")
    app.setDesktopFileName("chinwag")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)

    from app.store import Store
    from engine.errors import ChinwagError

    try:
        store = Store()
    except ChinwagError as e:
        # Not inside a coroutine: the loop has not started, so a modal box is fine here.
        QMessageBox.critical(None, "Chinwag", f"Chinwag cannot open its conversations:\n{e}")
        return 1

    from app.window import MainWindow

    window = MainWindow(store)
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
            logging.getLogger(__name__).warning("shutdown: %s", e)
        # Delete the window here, on the GUI thread: left to the garbage collector it could
        # be collected on another thread (the engine's), which Qt does not allow.
        window.deleteLater()
        app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        del window
        gc.collect()
    # qasync's loop keeps Qt timers for cancelled handles; free it here, on this thread.
    del loop
    gc.collect()
    store.close()
    return int(code)


def main():
    sys.exit(run_app(sys.argv[1:]))


if __name__ == "__main__":
    main()
