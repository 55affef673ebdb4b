"""The model picker in the chat header: the loaded model's name; click for the same menu as
Model (every model engine.list_models() gives, server models grouped by server, and the
import/download/server actions), so the two never differ."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QToolButton

from app.gui.models.menu import ModelMenu, describe

NO_MODEL = "No model"


class ModelPicker(QToolButton):
    modelChosen = Signal(str)  # a registry id
    downloadRequested = Signal()
    importGgufRequested = Signal()
    addFolderRequested = Signal()
    showFolderRequested = Signal()
    connectServerRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.setAutoRaise(True)
        self.menu_ = ModelMenu(self)
        for name in (
            "modelChosen",
            "downloadRequested",
            "importGgufRequested",
            "addFolderRequested",
            "showFolderRequested",
            "connectServerRequested",
        ):
            getattr(self.menu_, name).connect(getattr(self, name))
        self.setMenu(self.menu_)
        self._models: list = []
        self._current = None
        self._show_current()

    @property
    def model_actions(self):
        return self.menu_.model_actions

    def action_for(self, model_id):
        return self.menu_.action_for(model_id)

    def set_models(self, models, current_id=None):
        self._models, self._current = list(models), current_id
        self.menu_.set_models(models, current_id)
        self._show_current()

    def set_current(self, current_id):
        self._current = current_id
        self.menu_.set_current(current_id)
        self._show_current()

    def set_busy(self, busy: bool):
        """While a model loads, choosing another is disabled."""
        self.menu_.set_busy(busy)
        self.setEnabled(not busy)

    def current_name(self) -> str:
        info = next((m for m in self._models if m.id == self._current), None)
        return (info.name or info.id) if info else (self._current or NO_MODEL)

    def _show_current(self):
        self.setText(self.current_name())
        info = next((m for m in self._models if m.id == self._current), None)
        self.setToolTip(f"Model: {describe(info)} — click to switch" if info else "Choose a model")
