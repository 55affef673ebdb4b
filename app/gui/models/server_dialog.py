"""Model › Connect to Server…: add, edit and remove the model servers Chinwag can chat through.

Non-blocking: every engine call (files, the keychain, the network) runs as a task kept by the
EngineBridge; the dialog only shows what came back.
"""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
)

from engine.errors import ChinwagError
from engine.log import report_bug
from engine.types import UNREACHABLE, ModelStatus, down_state

HINT = (
    "An OpenAI-compatible server: mlx_lm.server (also across Macs with mlx.launch), exo, vLLM, "
    "SGLang, llama.cpp, Ollama or LM Studio. Its models appear in the Model menu under its name."
)


class ServerDialog(QDialog):
    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.setObjectName("serverDialog")
        self.setWindowTitle("Connect to Server")
        self.bridge = bridge
        self.editing = ""  # the saved name of the server being edited; "" for a new one
        self._servers = []
        layout = QVBoxLayout(self)
        hint = QLabel(HINT)
        hint.setWordWrap(True)
        layout.addWidget(hint)

        self.server_list = QListWidget()
        self.server_list.setObjectName("serverList")
        self.server_list.setMaximumHeight(110)
        self.server_list.currentItemChanged.connect(self._on_selected)
        layout.addWidget(self.server_list)
        row = QHBoxLayout()
        self.new_button = QPushButton("New")
        self.new_button.clicked.connect(self.new_server)
        self.remove_button = QPushButton("Remove")
        self.remove_button.setEnabled(False)
        self.remove_button.clicked.connect(self.remove_selected)
        row.addWidget(self.new_button)
        row.addWidget(self.remove_button)
        row.addStretch(1)
        layout.addLayout(row)

        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("e.g. studio")
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://192.168.1.20:8080/v1")
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("optional")
        form.addRow("Name", self.name_edit)
        form.addRow("Base URL", self.url_edit)
        form.addRow("API key", self.key_edit)
        layout.addLayout(form)

        self.message = QLabel()
        self.message.setObjectName("serverMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.message)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.save_button = buttons.addButton("Connect", QDialogButtonBox.ButtonRole.ActionRole)
        self.save_button.setDefault(True)
        self.save_button.clicked.connect(self.save)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.setMinimumWidth(500)
        self.busy = False
        self.reload()
        self.name_edit.setFocus()

    # --- the list ---------------------------------------------------------
    def reload(self):
        return self.bridge.run(self._reload())

    async def _reload(self, select: str = ""):
        try:
            self._servers = await self.bridge.engine.list_servers()
        except Exception as e:  # noqa: BLE001 - one line in the dialog; _reason logs a bug with its traceback
            self.message.setText(_reason(e))
            return
        self.server_list.blockSignals(True)
        self.server_list.clear()
        for server in self._servers:
            item = QListWidgetItem(
                f"{server.name} — {server.url}" + ("  (API key saved)" if server.has_api_key else "")
            )
            item.setData(Qt.ItemDataRole.UserRole, server.name)
            self.server_list.addItem(item)
            if server.name == select:
                self.server_list.setCurrentItem(item)
        self.server_list.blockSignals(False)
        self.remove_button.setEnabled(self.server_list.currentItem() is not None)

    def _on_selected(self, item, _previous=None):
        server = next(
            (s for s in self._servers if item is not None and s.name == item.data(Qt.ItemDataRole.UserRole)), None
        )
        self.remove_button.setEnabled(server is not None)
        if server is None:
            return
        self.editing = server.name
        self.name_edit.setText(server.name)
        self.url_edit.setText(server.url)
        self.key_edit.clear()
        self.key_edit.setPlaceholderText(
            "saved (type to replace, or clear with a space)" if server.has_api_key else "optional"
        )
        self.save_button.setText("Save")
        self.message.clear()

    def new_server(self):
        self.editing = ""
        self.server_list.clearSelection()
        self.server_list.setCurrentRow(-1)  # no current item
        for edit in (self.name_edit, self.url_edit, self.key_edit):
            edit.clear()
        self.key_edit.setPlaceholderText("optional")
        self.save_button.setText("Connect")
        self.message.clear()
        self.name_edit.setFocus()

    # --- saving and removing ---------------------------------------------------
    def save(self):
        if self.busy:
            return None
        key = self.key_edit.text()
        # Editing keeps the saved key unless one is typed; a lone space clears it.
        api_key = None if not key and self.editing else key.strip()
        return self.bridge.run(self._save(self.name_edit.text().strip(), self.url_edit.text().strip(), api_key))

    async def _save(self, name, url, api_key):
        self._set_busy(True, f"Connecting to {name or 'the server'}…")
        try:
            server = await self.bridge.engine.save_server(name, url, api_key, self.editing)
        except Exception as e:  # noqa: BLE001 - one line in the dialog; _reason logs a bug with its traceback
            self._set_busy(False, _reason(e))
            return
        self.editing = server.name
        self.url_edit.setText(server.url)  # as normalized and saved
        self.key_edit.clear()
        self.key_edit.setPlaceholderText(
            "saved (type to replace, or clear with a space)" if server.has_api_key else "optional"
        )
        self.save_button.setText("Save")
        await self._reload(select=server.name)
        models = [m for m in await self.bridge.refresh_models() if m.server == server.name]
        down = next((m for m in models if m.status == ModelStatus.UNUSABLE), None)
        if down is not None:
            state, reason = down_state(down)
            what = "it is not reachable" if state == UNREACHABLE else "it answered and cannot be used"
            text = f"Saved {server.name}, but {what}: {reason}"
        else:
            names = ", ".join(m.id.split("/", 1)[1] for m in models[:6])
            text = f"Connected to {server.name}: {len(models)} model(s) ({names}). Pick one in the Model menu."
        if api_key and server.key_storage:  # a key was typed: say where it really went
            text += f" API key kept in {server.key_storage}."
        self._set_busy(False, text)

    def remove_selected(self):
        item = self.server_list.currentItem()
        if item is None or self.busy:
            return None
        return self.bridge.run(self._remove(item.data(Qt.ItemDataRole.UserRole)))

    async def _remove(self, name):
        self._set_busy(True, f"Removing {name}…")
        try:
            await self.bridge.engine.remove_server(name)
        except Exception as e:  # noqa: BLE001 - one line in the dialog; _reason logs a bug with its traceback
            self._set_busy(False, _reason(e))
            return
        self.new_server()
        await self._reload()
        await self.bridge.refresh_models()
        self._set_busy(False, f"Removed {name} and its API key.")

    def _set_busy(self, busy, text):
        self.busy = busy
        for widget in (self.save_button, self.remove_button, self.new_button):
            widget.setEnabled(not busy)
        if not busy:
            self.remove_button.setEnabled(self.server_list.currentItem() is not None)
        self.message.setText(text)


def _reason(e: Exception) -> str:
    """A ChinwagError's line, or for a bug (logged with its traceback) where the log is."""
    return str(e) if isinstance(e, ChinwagError) else report_bug(e, "the server dialog")


def open_server_dialog(window) -> ServerDialog:
    """Open the dialog from the main window's Model menu (non-modal, kept alive while open)."""
    return window.dialogs.keep(ServerDialog(window.bridge, window))
