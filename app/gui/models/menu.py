"""The Model menu (every model the registry knows, the loaded one checked) and the
Hugging Face download dialog."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
)

from app.core.sizes import format_bytes
from app.gui import tooltips
from app.gui.models.model_list import ModelList
from engine.types import UNREACHABLE, UNUSABLE, ModelSource, ModelStatus, down_state


def sentence(reason: str) -> str:
    """An engine's one-line error ("could not reach …") as the dialog shows it: a sentence."""
    reason = " ".join(str(reason).split())
    reason = reason[:1].upper() + reason[1:]
    return reason if not reason or reason.endswith((".", "!", "?")) else reason + "."


def describe(info) -> str:
    """'SmolLM2 135M Instruct — 270.0 MB · Q8_0'"""
    bits = []
    if info.size_bytes:
        bits.append(format_bytes(info.size_bytes))
    if info.quantization:
        bits.append(info.quantization)
    if info.status == ModelStatus.NEEDS_IMPORT:
        bits.append("imported on first use")
    return f"{info.name or info.id}" + (f" — {' · '.join(bits)}" if bits else "")


# What a server's menu entry says when it cannot be used (its tooltip says why).
DOWN_LABELS = {UNREACHABLE: "Not reachable", UNUSABLE: "Not usable"}


class ModelMenu(QMenu):
    """Shows a ModelList; what the user picks is emitted by the list (modelChosen, …Requested)."""

    def __init__(self, models: ModelList, parent=None):
        super().__init__("&Model", parent)
        self.setObjectName("modelMenu")
        self.setToolTipsVisible(True)
        self.models = models
        self.model_actions: list[QAction] = []
        models.changed.connect(self._rebuild)
        self._rebuild()

    def _rebuild(self):
        self.clear()
        self.model_actions = []
        models = self.models
        local = [m for m in models.models if m.source != ModelSource.SERVER]
        if not local:
            empty = self.addAction("No models found yet")
            empty.setEnabled(False)
        for info in local:
            action = self.addAction(describe(info))
            action.setCheckable(True)
            action.setChecked(info.id == models.current_id)
            action.setData(info.id)
            usable = info.status != ModelStatus.UNUSABLE and not info.fit_reason  # greyed: refused before a load
            action.setEnabled(usable and not models.busy)
            tip = (info.reason or sentence(info.fit_reason)) if not usable else (info.path or info.id)
            if info.context_length:
                tip += f"\ncontext {info.context_length:,} tokens"
            action.setToolTip(tooltips.plain(tip))
            action.triggered.connect(lambda _checked=False, mid=info.id: self._choose(mid))
            self.model_actions.append(action)
        self._add_server_models([m for m in models.models if m.source == ModelSource.SERVER])
        self.addSeparator()
        self.addAction("Connect to Server…", models.connectServerRequested.emit)
        self.addAction("Import GGUF…", models.importGgufRequested.emit)
        self.addAction("Add Model Folder…", models.addFolderRequested.emit)
        self.addAction("Download from Hugging Face…", models.downloadRequested.emit)
        self.addSeparator()
        self.addAction("Show Models Folder", models.showFolderRequested.emit)

    def _add_server_models(self, infos):
        """Each server's models under its name; an unreachable server says why."""
        for server in dict.fromkeys(m.server for m in infos):
            self.addSection(server)
            for info in (m for m in infos if m.server == server):
                usable = info.status != ModelStatus.UNUSABLE
                model = info.id.split("/", 1)[1] if "/" in info.id else info.name
                action = self.addAction(model if usable else DOWN_LABELS[down_state(info)[0]])
                action.setCheckable(usable)
                action.setChecked(info.id == self.models.current_id)
                action.setData(info.id)
                action.setEnabled(usable and not self.models.busy)
                action.setToolTip(tooltips.plain(f"{info.path}\n{info.reason}" if info.reason else info.path))
                action.triggered.connect(lambda _checked=False, mid=info.id: self._choose(mid))
                self.model_actions.append(action)

    def _choose(self, model_id):
        # Keep the check on the loaded model until the new one has actually loaded.
        self._rebuild()
        if model_id != self.models.current_id:  # the loaded one again: nothing to load (seen on X: 4 s)
            self.models.modelChosen.emit(model_id)

    def action_for(self, model_id):
        for action in self.model_actions:
            if action.data() == model_id:
                return action
        return None


class DownloadDialog(QDialog):
    """Asks for a repo id, shows progress, can cancel. Non-blocking: show with open()."""

    downloadRequested = Signal(str)
    cancelRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("downloadDialog")
        self.setWindowTitle("Download from Hugging Face")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Repository id of an MLX model, e.g. mlx-community/SmolLM2-360M-Instruct"))
        row = QHBoxLayout()
        self.repo = QLineEdit()
        self.repo.setPlaceholderText("owner/name")
        self.repo.returnPressed.connect(self._start)
        row.addWidget(self.repo, 1)
        self.start_button = QPushButton("Download")
        self.start_button.clicked.connect(self._start)
        row.addWidget(self.start_button)
        layout.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        layout.addWidget(self.progress)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.message)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.buttons.rejected.connect(self._close_or_cancel)
        layout.addWidget(self.buttons)
        self.running = False
        self.setMinimumWidth(460)

    def _start(self):
        repo = self.repo.text().strip()
        if self.running:
            return
        if repo.count("/") != 1 or " " in repo:
            self.message.setText("Enter a repository id like owner/name.")
            return
        self.running = True
        self.start_button.setEnabled(False)
        self.repo.setEnabled(False)
        self.progress.setVisible(True)
        self.progress.setRange(0, 0)
        self.message.setText(f"Downloading {repo}…")
        self.buttons.button(QDialogButtonBox.StandardButton.Close).setText("Cancel")
        self.downloadRequested.emit(repo)

    def on_progress(self, p):
        if p.total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(1.0, p.done / p.total)))
        self.message.setText(p.stage)

    def on_finished(self, info):
        self._idle()
        self.progress.setRange(0, 1000)
        self.progress.setValue(1000)
        self.message.setText(f"Downloaded {info.name or info.id}. Choose it in the Model menu.")

    def on_failed(self, reason: str):
        self._idle()
        self.progress.setVisible(False)
        self.message.setText(sentence(reason))

    def _idle(self):
        self.running = False
        self.start_button.setEnabled(True)
        self.repo.setEnabled(True)
        self.buttons.button(QDialogButtonBox.StandardButton.Close).setText("Close")

    def reject(self):
        if self.running:  # closing the dialog cancels the download
            self.cancelRequested.emit()
        super().reject()

    def _close_or_cancel(self):
        if self.running:
            self.message.setText("Cancelling…")
            self.cancelRequested.emit()
        else:
            super().reject()
