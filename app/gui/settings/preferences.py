"""Preferences: the app's own settings (theme, font size, default model) above the defaults
for every chat (the SettingsDialog fields; the prefill-while-typing switch is one of those,
the key `prefill_while_typing`).

App settings live in the store's state table under APP_KEY; APP_DEFAULTS is their one source.
"""

from collections.abc import Callable

from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QWidget,
)

from app.gui.settings import fit
from app.gui.settings.dialog import SettingsDialog
from app.gui.theme import THEMES, system_point_size
from engine.errors import ChinwagError
from engine.types import ModelStatus

APP_KEY = "app_settings"
APP_DEFAULTS = {
    "theme": "system",  # one of app.gui.theme.THEMES
    "font_size": 0,  # points; 0: the system's size
    "default_model": "",  # model loaded at start; "": the last one used
    "memory_limit": "",  # what models may use ("6GB", "70%"); "": what the machine has (app/gui/settings/fit.py)
    "kv_cache": {},  # model id -> {"bits", "group_size"}: its KV cache quantized (app/gui/settings/fit.py)
}
FONT_SIZE_RANGE = (8, 24)  # points a user can pick; one below the range means "system"


def load_app_settings(store) -> dict:
    values = dict(APP_DEFAULTS)
    try:
        saved = store.get_state(APP_KEY, {}) or {}
    except ChinwagError:
        saved = {}
    if isinstance(saved, dict):
        values.update({k: v for k, v in saved.items() if k in APP_DEFAULTS and type(v) is type(APP_DEFAULTS[k])})
    if values["theme"] not in THEMES:
        values["theme"] = APP_DEFAULTS["theme"]
    return values


class FontSizeBox(QSpinBox):
    """Points, with "System size" below the range: a step from it starts at the system's size."""

    def stepBy(self, steps: int):
        if self.value() == self.minimum() and steps:
            self.setValue(max(FONT_SIZE_RANGE[0], min(FONT_SIZE_RANGE[1], system_point_size() + steps)))
            return
        super().stepBy(steps)

    def stepEnabled(self):
        if self.value() == self.minimum():  # both ways lead away from "System size"
            return QAbstractSpinBox.StepEnabledFlag.StepUpEnabled | QAbstractSpinBox.StepEnabledFlag.StepDownEnabled
        return super().stepEnabled()


class PreferencesDialog(SettingsDialog):
    def __init__(
        self,
        chat_defaults: dict,
        app_values: dict,
        models,
        parent=None,
        server_status: Callable[[], str] | None = None,
        open_server: Callable[[], object] | None = None,
        current_model: str = "",
    ):
        super().__init__(chat_defaults, chat_defaults, "Preferences", parent)
        self.extra_group.setTitle("Chinwag")
        self.extra_group.setVisible(True)
        self.chat_group.setTitle("Defaults for every chat that does not set its own")
        self.theme_box = QComboBox()
        self.theme_box.setObjectName("theme")
        for name in THEMES:
            self.theme_box.addItem(name.capitalize() if name != "system" else "Same as the system", name)
        self.theme_box.setToolTip("Light or dark, or follow the system's choice")
        self.font_box = FontSizeBox()
        self.font_box.setObjectName("fontSize")
        self.font_box.setRange(FONT_SIZE_RANGE[0] - 1, FONT_SIZE_RANGE[1])
        self.font_box.setSpecialValueText("System size")  # shown at the minimum, stored as 0
        self.font_box.setSuffix(" pt")
        self.font_box.setToolTip("The text size of the whole window")
        self.model_box = QComboBox()
        self.model_box.setObjectName("defaultModel")
        self.model_box.addItem("The last one used", "")
        for m in models:
            if getattr(m, "status", "") != ModelStatus.UNUSABLE:
                self.model_box.addItem(m.name or m.id, m.id)
        self.model_box.setToolTip("The model Chinwag loads when it starts")
        self.extra_form.addRow("Theme", self.theme_box)
        self.extra_form.addRow("Font size", self.font_box)
        self.extra_form.addRow("Default model", self.model_box)
        self._add_fit_rows(models, current_model)
        self._server_status = server_status
        if open_server is not None:  # the same File › Server… dialog: one place turns the server on and off
            row = QWidget()
            box = QHBoxLayout(row)
            box.setContentsMargins(0, 0, 0, 0)
            self.server_label = QLabel()
            self.server_label.setObjectName("serverStatus")
            self.server_button = QPushButton("Server…")
            self.server_button.setObjectName("openServer")
            self.server_button.setToolTip("Serve the loaded model to other apps over the OpenAI API")
            self.server_button.clicked.connect(open_server)
            box.addWidget(self.server_label, 1)
            box.addWidget(self.server_button)
            self.extra_form.addRow("Server", row)
            self.refresh_server()
        # Created after the chat rows below them: put them first in the Tab order too.
        above = [self.theme_box, self.font_box, self.model_box, self.memory_edit, self.kv_bits, self.kv_group]
        if open_server is not None:
            above.append(self.server_button)
        for a, b in zip(above, [*above[1:], self.preset_box], strict=True):
            QWidget.setTabOrder(a, b)
        self.set_app_values(app_values)

    def _add_fit_rows(self, models, current_model: str):
        """The memory limit, and the loaded model's KV cache (its own setting, kept per model)."""
        self.memory_edit = QLineEdit()
        self.memory_edit.setObjectName("memoryLimit")
        self.memory_edit.setPlaceholderText("What this computer has available")
        self.memory_edit.setToolTip(
            "The memory a model and its chats may use: 6GB, 6144MB, 6GiB or a share of RAM such as 70%."
            " A model that does not fit is refused before it loads; a chat's context is capped at what it leaves"
        )
        self.extra_form.addRow("Memory limit", self.memory_edit)
        self.current_model = current_model
        name = next((m.name or m.id for m in models if m.id == current_model), current_model)
        self.kv_bits, self.kv_group = QComboBox(), QComboBox()
        self.kv_bits.setObjectName("kvBits")
        self.kv_group.setObjectName("kvGroupSize")
        for bits, label in fit.KV_CHOICES:
            self.kv_bits.addItem(label, bits)
        for size in fit.GROUP_CHOICES:
            self.kv_group.addItem(f"groups of {size}", size)
        self.kv_bits.setToolTip(
            "Store this model's KV cache at 8 or 4 bits: about 3x or 5x longer chats in the same memory;"
            " 8-bit replies are nearly always the same, 4-bit ones often differ. The model loads again"
        )
        self.kv_group.setToolTip("Values per quantization group: smaller groups are more exact and a little bigger")
        self.kv_bits.currentIndexChanged.connect(lambda _i: self.kv_group.setEnabled(bool(self.kv_bits.currentData())))
        row = QWidget()
        box = QHBoxLayout(row)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.kv_bits, 1)
        box.addWidget(self.kv_group, 1)
        self.extra_form.addRow(f"KV cache of {name}" if name else "KV cache", row)
        row.setEnabled(bool(current_model))  # a setting of the loaded model
        self.fit_error = QLabel()
        self.fit_error.setObjectName("fitError")
        self.fit_error.setWordWrap(True)
        self.fit_error.setVisible(False)
        self.extra_form.addRow("", self.fit_error)

    def accept(self):
        """A refused memory limit stays in the dialog with one line saying why."""
        try:
            fit.memory_limit(self.memory_edit.text())
        except ChinwagError as e:
            self.fit_error.setText(str(e))
            self.fit_error.setVisible(True)
            self.memory_edit.setFocus()
            return
        super().accept()

    def first_field(self) -> QWidget:
        return self.theme_box

    def refresh_server(self) -> None:
        """The Server row's state (the server starts and stops in its own dialog)."""
        if self._server_status is not None and hasattr(self, "server_label"):
            self.server_label.setText(self._server_status())

    def set_app_values(self, values: dict):
        self.theme_box.setCurrentIndex(max(0, self.theme_box.findData(values.get("theme", "system"))))
        size = int(values.get("font_size") or 0)
        self.font_box.setValue(size if size > self.font_box.minimum() else self.font_box.minimum())
        index = self.model_box.findData(values.get("default_model", ""))
        if index < 0:  # a default model that is gone: keep it, named by its id
            self.model_box.addItem(str(values.get("default_model")), values.get("default_model"))
            index = self.model_box.count() - 1
        self.model_box.setCurrentIndex(index)
        self.memory_edit.setText(str(values.get("memory_limit", "")))
        self._kv_cache = dict(values.get("kv_cache") or {})
        entry = self._kv_cache.get(self.current_model) or {}
        self.kv_bits.setCurrentIndex(max(0, self.kv_bits.findData(entry.get("bits", 0))))
        self.kv_group.setCurrentIndex(max(0, self.kv_group.findData(entry.get("group_size", 64))))
        self.kv_group.setEnabled(bool(self.kv_bits.currentData()))

    def app_values(self) -> dict:
        size = self.font_box.value()
        return {
            "theme": self.theme_box.currentData(),
            "font_size": 0 if size <= self.font_box.minimum() else size,
            "default_model": self.model_box.currentData() or "",
            "memory_limit": self.memory_edit.text().strip(),
            "kv_cache": self._kv_values(),
        }

    def _kv_values(self) -> dict:
        kv = dict(self._kv_cache)
        if self.current_model:
            bits = self.kv_bits.currentData()
            kv.pop(self.current_model, None)
            if bits:
                kv[self.current_model] = {"bits": bits, "group_size": self.kv_group.currentData()}
        return kv
