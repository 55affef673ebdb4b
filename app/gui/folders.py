"""Where file dialogs open: one rule for every dialog of the window."""

from pathlib import Path

from PySide6.QtCore import QStandardPaths


def start_folder() -> str:
    """Documents, or the home folder when there is none (a missing folder made Qt open wherever
    the app was started from)."""
    docs = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    return docs if docs and Path(docs).is_dir() else str(Path.home())
