"""File › Server…: the OpenAI-compatible server (app/server/) on the window's own engine.

The server runs as a task on the window's qasync loop (uvicorn's `Server.serve()`), kept by
`ServerControl`; requests and the window's chats share one engine and wait their turn on its
thread. Access from other machines needs a key: one is generated and shown in the dialog.
"""

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
)

from app.core import serving
from app.gui import tooltips
from engine.errors import ChinwagError

if TYPE_CHECKING:
    from app.server.run import ApiServer

DEFAULT_PORT = 8080  # as `chinwag serve`
# The window's own key, kept where the saved servers' keys are (a '/' no server name can hold).
KEY_NAME = "/serve"
LISTED_REQUESTS = 12  # the dialog's short live list
COLUMNS = ("Client", "Model", "Prompt", "Cached", "First token", "End")


def own_key() -> str:
    """The window's API key for access from other machines: the stored one, or a new one stored now."""
    from engine.remote import servers

    key = servers.api_key(KEY_NAME)
    if not key:
        key = secrets.token_urlsafe(24)
        servers.set_api_key(KEY_NAME, key)
    return key


class ServerControl(QObject):
    """Owns the window's ApiServer (or None) and turns its requests into a signal."""

    changed = Signal()  # started or stopped
    served = Signal(object)  # app.server.service.RequestRecord
    failed = Signal(str)  # one line
    waiting = Signal(str)  # a request waits for the window's reply (a line), or no longer ("")

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.server: ApiServer | None = None  # while running
        self._stopping = None  # the task stopping the last one: a new start waits for its port
        self.api_key = ""

    @property
    def running(self) -> bool:
        return self.server is not None

    def start(self, port: int = DEFAULT_PORT, others: bool = False):
        return self.bridge.run(self._start(port, others))

    async def _start(self, port: int, others: bool) -> None:
        from app.server.http import ServerConfig
        from app.server.run import ApiServer

        if self._stopping is not None:
            await asyncio.wait([self._stopping])
        if self.server is not None:
            return
        other = serving.current()  # `chinwag serve` on this data folder: a second model, the same kv/
        if other is not None:
            self.failed.emit(f"{other.line()}: stop it there first.")  # "chinwag serve" is a command: as typed
            return
        key = await asyncio.to_thread(own_key) if others else ""
        config = ServerConfig(host="0.0.0.0" if others else "127.0.0.1", port=port, api_key=key)
        try:
            server = ApiServer(self.bridge.engine, config)
            server.start()  # binds now: a taken port fails here
        except ChinwagError as e:
            self.failed.emit(str(e))
            return
        server.service.listeners.append(self.served.emit)
        server.service.wait_listeners.append(self.waiting.emit)
        assert server.task is not None
        server.task.add_done_callback(lambda _t: self._ended(server))
        self.server, self.api_key = server, key
        self._claim(server.url)
        self.changed.emit()

    def _claim(self, url: str) -> None:
        try:
            serving.claim(serving.WINDOW, url)  # `chinwag serve` on this data folder says where this is
        except (OSError, ChinwagError) as e:  # serving goes on; only the other side's warning is lost
            logging.getLogger(__name__).warning("writing %s: %s", serving.SERVING_FILE, e)

    def _ended(self, server: "ApiServer") -> None:
        if self.server is server and server.task is not None and server.task.done():
            error = None if server.task.cancelled() else server.task.exception()
            self.server = None
            serving.release()
            if error is not None:
                from engine.log import report_bug

                self.failed.emit(report_bug(error, "the window's server"))
            self.changed.emit()

    def stop(self):
        self._stopping = self.bridge.run(self.aclose())
        return self._stopping

    async def aclose(self) -> None:
        """Stop the server (before the engine closes): open streams end, the conversation map is saved."""
        server, self.server = self.server, None
        if server is not None:
            serving.release()
            self.changed.emit()  # no new request is taken from now on
            await server.stop()

    def url(self) -> str:
        return self.server.url if self.server is not None else ""


class ServingButton(QToolButton):
    """The status bar's "Serving 127.0.0.1:8080" while the window serves the API; a click opens File › Server…."""

    def __init__(self, control: ServerControl, open_dialog, parent=None):
        super().__init__(parent)
        self.setObjectName("statusServing")
        self.setAutoRaise(True)
        self.control = control
        self.clicked.connect(open_dialog)
        control.changed.connect(self.refresh)
        self.refresh()

    def refresh(self) -> None:
        url = self.control.url()
        where = url.split("://", 1)[-1].removesuffix("/v1")
        self.setText(f"Serving {where}" if url else "")
        self.setToolTip(f"The OpenAI-compatible API is served at {url}: click for the Server window" if url else "")
        self.setAccessibleName(self.text())
        self.setVisible(bool(url))


def other_server_line() -> str:
    """A banner's line when `chinwag serve` already serves this data folder ("" : nobody else does)."""
    other = serving.current()
    if other is None:
        return ""
    return (
        f"{other.line()}: it and this window share the saved caches. "
        "Stop it, or give it another data folder (CHINWAG_HOME)."
    )


class ServerDialog(QDialog):
    def __init__(self, control: ServerControl, parent=None):
        super().__init__(parent)
        self.setObjectName("apiServerDialog")
        self.setWindowTitle("Server")
        self.control = control
        layout = QVBoxLayout(self)
        hint = QLabel(
            "Serve the loaded model to other apps over the OpenAI API (editors, agents, scripts). "
            "They share this window's model and caches; a request waits while a reply is generating."
        )
        hint.setWordWrap(True)
        layout.addWidget(hint)
        form = QFormLayout()
        self.port_box = QSpinBox()
        self.port_box.setRange(1, 65535)
        self.port_box.setValue(DEFAULT_PORT)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)  # a port, not a line of text
        form.addRow("Port", self.port_box)
        self.others_box = QCheckBox("Allow other machines (with a generated API key)")
        form.addRow("", self.others_box)
        self.url_label = QLabel()
        self.url_label.setObjectName("serverUrl")
        form.addRow("URL", self.url_label)
        self.key_label = QLabel()
        self.key_label.setObjectName("serverKey")
        self.key_label.setTextInteractionFlags(self.key_label.textInteractionFlags() | self._selectable())
        form.addRow("API key", self.key_label)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.toggle_button = QPushButton()
        self.toggle_button.setObjectName("serverToggle")
        self.toggle_button.clicked.connect(self.toggle)
        row.addWidget(self.toggle_button)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        row.addWidget(self.status_label, 1)
        layout.addLayout(row)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("serverRequests")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)
        # Every cell whole (seen on X: "127.0.0.1:56…", a model id on two cut lines): the model takes what is left.
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COLUMNS.index("Model"), QHeaderView.ResizeMode.Stretch)
        layout.addWidget(self.table, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        control.changed.connect(self.refresh)
        control.served.connect(self.add_record)
        control.failed.connect(self.status_label.setText)
        control.waiting.connect(self.status_label.setText)
        if control.server is not None:
            for record in list(control.server.service.recent)[-LISTED_REQUESTS:]:
                self.add_record(record)
        self.refresh()
        self.resize(640, 420)

    @staticmethod
    def _selectable():
        from PySide6.QtCore import Qt

        return Qt.TextInteractionFlag.TextSelectableByMouse

    def toggle(self) -> None:
        self.status_label.setText("")
        if self.control.running:
            self.control.stop()
        else:
            self.control.start(self.port_box.value(), self.others_box.isChecked())

    def refresh(self) -> None:
        on = self.control.running
        self.toggle_button.setText("Stop Server" if on else "Start Server")
        self.port_box.setEnabled(not on)
        self.others_box.setEnabled(not on)
        self.url_label.setText(self.control.url() if on else "not running")
        self.key_label.setText(self.control.api_key if on and self.control.api_key else "none (this machine only)")

    def add_record(self, record) -> None:
        cells = (
            record.client,
            record.model.rsplit("/", 1)[-1],
            str(record.prompt_tokens),
            str(record.cached_tokens),
            f"{record.ttft_s:.2f} s" + (f" (waited {record.waited_s:.1f} s)" if record.waited_s >= 0.5 else ""),
            record.finish_reason,
        )
        self.table.insertRow(0)
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(
                tooltips.plain(record.model if COLUMNS[column] == "Model" else text)
            )  # the model may be elided
            self.table.setItem(0, column, item)
        while self.table.rowCount() > LISTED_REQUESTS:
            self.table.removeRow(self.table.rowCount() - 1)


def open_api_server_dialog(window) -> ServerDialog:
    """Open File › Server… beside the window (not modal: the user chats while it lists requests); one at a time."""
    for dialog in window.dialogs.open_dialogs:
        if isinstance(dialog, ServerDialog):
            dialog.raise_()
            dialog.activateWindow()
            return dialog
    return window.dialogs.keep(ServerDialog(window.server_control, window), modal=False)
