"""The cold-start child of bench/figures/ui.py: `chinwag` as app.gui.main.run_app runs it, until the main
window's first Paint event, then it prints the time and exits. Imports nothing else first."""

import json
import os
import sys
import time


def main():
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication, QMainWindow

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and isinstance(obj, QMainWindow):
                print(
                    json.dumps({"painted_at": time.time(), "messages_shown": len(obj.chat_view.message_widgets())}),
                    flush=True,
                )
                os._exit(0)
            return False

    app = QApplication([sys.argv[0]])
    probe = FirstPaint()
    app.installEventFilter(probe)
    from app.gui.main import run_app

    run_app([])
    os._exit(3)  # the window closed without painting


if __name__ == "__main__":
    main()
