"""Help › About: the version, where the data lives, and the log one click away."""

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPushButton, QVBoxLayout, QWidget

from app.core.version import app_version
from engine import paths
from engine.log import LOG_FILE


class AboutDialog(QDialog):
    def __init__(
        self, parent: QWidget | None = None, open_url: Callable[[QUrl], bool] = QDesktopServices.openUrl
    ) -> None:
        super().__init__(parent)
        self._open_url = open_url
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About Chinwag")
        layout = QVBoxLayout(self)
        title = QLabel(f"Chinwag {app_version()}")
        title.setObjectName("aboutTitle")
        font = title.font()
        font.setBold(True)
        title.setFont(font)
        layout.addWidget(title)
        layout.addWidget(QLabel("A desktop chat for language models, built on MLX."))
        self.folder = paths.data_dir_path()
        self.log_path = self.folder / LOG_FILE
        where = QLabel(f"Your conversations, models and settings are in\n{self.folder}")
        where.setObjectName("aboutFolder")
        where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        where.setWordWrap(True)
        layout.addWidget(where)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.folder_button = QPushButton("Open Data Folder")
        self.folder_button.clicked.connect(lambda: self.open_path(self.folder))
        self.log_button = QPushButton("Open the Log")
        self.log_button.setToolTip(f"{self.log_path}: what went wrong, with details for a bug report")
        self.log_button.setEnabled(self.log_path.is_file())
        self.log_button.clicked.connect(lambda: self.open_path(self.log_path))
        buttons.addButton(self.folder_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.log_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        # Said here, where the button was pressed: without a file manager a click did nothing at all.
        self.failed = QLabel()
        self.failed.setObjectName("aboutFailed")
        self.failed.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.failed.setWordWrap(True)
        self.failed.hide()
        layout.addWidget(self.failed)
        layout.addWidget(buttons)

    def open_path(self, path: Path) -> bool:
        opened = bool(self._open_url(QUrl.fromLocalFile(str(path))))
        if not opened:
            self.failed.setText(f"Could not open {path}: no program here opens it. Open it from a file manager.")
            self.failed.show()
            self.adjustSize()  # the dialog grows to hold the new lines (it would squeeze every label)
        return opened
