"""Tools › MCP Servers…: add, edit, remove and enable MCP servers (mcp.json), import another app's
mcp.json, and set allow / ask / deny per server and per tool (mcp-chinwag.json).

The files are small and local: they are read and written here. Listing a server's tools starts
it, which runs as an asyncio task the dialog keeps (qasync keeps none).
"""

import asyncio
import dataclasses
import shlex

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.gui import tooltips
from app.gui.folders import start_folder
from app.tools import config
from app.tools.config import Policy
from app.tools.results import shown_name
from engine.errors import ChinwagError, one_line

HINT = (
    "MCP servers give models tools. They are kept in mcp.json in the data folder, in the format "
    "Claude Desktop, Cursor and LM Studio use. A command line starts a local server; an http(s) URL "
    "connects to a streamable HTTP one."
)
POLICIES = [(Policy.ASK, "Ask each time"), (Policy.ALLOW, "Allow"), (Policy.DENY, "Deny")]


def _policy_box(current: Policy) -> QComboBox:
    box = QComboBox()
    for policy, text in POLICIES:
        box.addItem(text, policy.value)
    box.setCurrentIndex([p for p, _ in POLICIES].index(current))
    return box


class ToolsDialog(QDialog):
    changed = Signal()  # the configuration was written

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("toolsDialog")
        self.setWindowTitle("MCP Servers")
        self.resize(620, 560)
        self.editing = ""  # the name of the server being edited; "" for a new one
        self.probe_task: asyncio.Task | None = None
        layout = QVBoxLayout(self)
        hint = QLabel(HINT)
        hint.setWordWrap(True)
        layout.addWidget(hint)

        self.server_list = QListWidget()
        self.server_list.setObjectName("mcpServerList")
        self.server_list.setMaximumHeight(130)
        self.server_list.currentItemChanged.connect(self._on_selected)
        self.server_list.itemChanged.connect(self._on_checked)
        layout.addWidget(self.server_list)
        row = QHBoxLayout()
        self.new_button = QPushButton("New")
        self.new_button.clicked.connect(self.new_server)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        self.import_button = QPushButton("Import mcp.json…")
        self.import_button.clicked.connect(self.import_dialog)
        for b in (self.new_button, self.remove_button, self.import_button):
            row.addWidget(b)
        row.addStretch(1)
        layout.addLayout(row)

        form = QFormLayout()
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("mcpName")
        self.target_edit = QLineEdit()
        self.target_edit.setObjectName("mcpTarget")
        self.target_edit.setPlaceholderText("npx -y @modelcontextprotocol/server-filesystem ~/notes  or  https://…/mcp")
        self.policy_box = _policy_box(Policy.ASK)
        self.policy_box.setObjectName("mcpPolicy")
        form.addRow("Name", self.name_edit)
        form.addRow("Command or URL", self.target_edit)
        form.addRow("Its tools", self.policy_box)
        layout.addLayout(form)
        row = QHBoxLayout()
        self.save_button = QPushButton("Save Server")
        self.save_button.setObjectName("mcpSave")
        self.save_button.clicked.connect(self.save_server)
        self.list_button = QPushButton("List Tools")
        self.list_button.setObjectName("mcpListTools")
        self.list_button.clicked.connect(self.list_tools)
        row.addWidget(self.save_button)
        row.addWidget(self.list_button)
        row.addStretch(1)
        layout.addLayout(row)

        rounds = QFormLayout()
        self.rounds_box = QSpinBox()
        self.rounds_box.setObjectName("mcpMaxRounds")
        self.rounds_box.setRange(1, 100)
        self.rounds_box.setToolTip(
            "A reply that keeps calling tools stops after this many rounds, with a line saying so"
        )
        try:
            self.rounds_box.setValue(config.load().max_rounds)
        except ChinwagError:
            self.rounds_box.setValue(config.DEFAULT_MAX_ROUNDS)
        self.rounds_box.valueChanged.connect(lambda n: self._do(lambda: config.set_max_rounds(n)))
        rounds.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)  # a number, not a line of text
        rounds.addRow("Tool rounds per reply", self.rounds_box)
        layout.addLayout(rounds)

        self.tools_box = QWidget()
        self.tools_form = QFormLayout(self.tools_box)
        layout.addWidget(self.tools_box, 1)
        self.status = QLabel("")
        self.status.setObjectName("mcpStatus")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.reload()

    # --- the list ---------------------------------------------------------------------

    def reload(self, select: str = "") -> None:
        try:
            servers = config.load().servers
        except ChinwagError as e:
            self.say(str(e))
            servers = ()
        self.server_list.blockSignals(True)
        self.server_list.clear()
        for s in servers:
            item = QListWidgetItem(f"{s.name}  —  {one_line(s.describe())[:70]}")
            item.setData(Qt.ItemDataRole.UserRole, s.name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if s.enabled else Qt.CheckState.Unchecked)
            self.server_list.addItem(item)
            if s.name == select:
                self.server_list.setCurrentItem(item)
        self.server_list.blockSignals(False)
        if select:
            self._show(select)

    def _on_selected(self, item, _previous=None) -> None:
        if item is not None:
            self._show(item.data(Qt.ItemDataRole.UserRole))

    def _show(self, name: str) -> None:
        try:
            s = config.load().server(name)
        except ChinwagError as e:
            self.say(str(e))
            return
        self.editing = name
        self.name_edit.setText(s.name)
        self.target_edit.setText(s.url or shlex.join([s.command, *s.args]))
        self.policy_box.setCurrentIndex([p for p, _ in POLICIES].index(s.policy))
        self._clear_tools()

    def _on_checked(self, item) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        self._do(lambda: config.set_enabled(name, item.checkState() == Qt.CheckState.Checked))

    # --- editing ----------------------------------------------------------------------

    def new_server(self) -> None:
        self.editing = ""
        self.server_list.setCurrentRow(-1)  # no current item
        self.name_edit.clear()
        self.target_edit.clear()
        self._clear_tools()
        self.name_edit.setFocus()

    def save_server(self) -> bool:
        name, target = self.name_edit.text().strip(), self.target_edit.text().strip()

        def save():
            if not name or not target:
                raise ChinwagError("a server needs a name and a command line or URL")
            if target.startswith(("http://", "https://")):
                keep = {}
                if self.editing == name:
                    keep = dict(config.load().server(name).headers)
                config.add_server(name, url=target, headers=keep)
            else:
                try:
                    words = shlex.split(target)
                except ValueError as e:
                    raise ChinwagError(f"the command line cannot be read: {e}") from None
                env = dict(config.load().server(name).env) if self.editing == name else {}
                config.add_server(name, words[0], words[1:], env=env)
            if self.editing and self.editing != name:
                config.remove_server(self.editing)
            config.set_policy(name, Policy(self.policy_box.currentData()))

        if not self._do(save):
            return False
        self.reload(select=name)
        self.say(f"Saved {name}.")
        return True

    def remove_selected(self) -> None:
        item = self.server_list.currentItem()
        if item is None:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        if self._do(lambda: config.remove_server(name)):
            self.new_server()
            self.reload()
            self.say(f"Removed {name}.")

    def import_dialog(self) -> QFileDialog:
        """Another app's mcp.json to import; opened in Documents, never a nested event loop."""
        dialog = QFileDialog(self, "Import mcp.json", start_folder(), "JSON (*.json)")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(self.import_file)
        dialog.finished.connect(dialog.deleteLater)
        dialog.open()
        return dialog

    def import_file(self, path) -> None:
        names: list = []
        if self._do(lambda: names.extend(config.import_file(path))):
            self.reload()
            self.say(f"Imported {', '.join(names) or 'no servers'}.")

    # --- tools ------------------------------------------------------------------------

    def _clear_tools(self) -> None:
        while self.tools_form.rowCount():
            self.tools_form.removeRow(0)

    def list_tools(self) -> asyncio.Task | None:
        """Start the selected server, list its tools with a policy for each, stop it."""
        if not self.editing:
            self.say("Save the server first.")
            return None
        name = self.editing
        self.say(f"Starting {name}…")
        self.list_button.setEnabled(False)
        self.probe_task = asyncio.ensure_future(self._probe(name))
        return self.probe_task

    async def _probe(self, name: str) -> None:
        from app.tools.probe import server_rows

        try:
            # Listed even while disabled: the user asked for this one.
            server = dataclasses.replace(config.load().server(name), enabled=True)
            (row,) = await server_rows([server])
        except ChinwagError as e:
            self.say(str(e))
            return
        finally:
            self.list_button.setEnabled(True)
        if name != self.editing:
            return
        self._clear_tools()
        if row["status"] != "ok":
            self.say(f"{name} failed: {row['reason'] or row['status']}")
            return
        for tool in row["tools"]:
            box = _policy_box(Policy(tool["policy"]))
            box.setObjectName(f"mcpToolPolicy_{tool['name']}")
            box.setToolTip(tooltips.plain(tool["description"]))
            box.currentIndexChanged.connect(
                lambda _i, t=tool["name"], b=box: self._do(lambda: config.set_policy(name, Policy(b.currentData()), t))
            )
            label = QLabel(shown_name(tool["name"]))
            label.setTextFormat(Qt.TextFormat.PlainText)
            self.tools_form.addRow(label, box)
        count = len(row["tools"])
        self.say(f"{name}: {count} tool{'' if count == 1 else 's'}.")

    # --- helpers ----------------------------------------------------------------------

    def _do(self, action) -> bool:
        try:
            action()
        except ChinwagError as e:
            self.say(str(e))
            return False
        self.changed.emit()
        return True

    def say(self, text: str) -> None:
        self.status.setText(one_line(text))

    def done(self, result: int) -> None:
        if self.probe_task is not None and not self.probe_task.done():
            self.probe_task.cancel()
        super().done(result)


def open_tools_dialog(window) -> ToolsDialog:
    """Chat › MCP Servers…: one dialog at a time, not modal (listing tools runs on the loop)."""
    dialog = getattr(window, "_tools_dialog", None)
    if dialog is None:
        dialog = window._tools_dialog = ToolsDialog(window)
        dialog.finished.connect(lambda _r: setattr(window, "_tools_dialog", None))
    dialog.show()
    dialog.raise_()
    return dialog
