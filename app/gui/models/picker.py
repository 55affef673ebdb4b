"""The model picker in the chat header: the loaded model's name; click for the same menu as
Model (every model engine.list_models() gives, server models grouped by server, and the
import/download/server actions), so the two never differ: both show one ModelList."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton

from app.gui.models.menu import ModelMenu, describe
from app.gui.models.model_list import ModelList

NO_MODEL = "No model"


class ModelPicker(QToolButton):
    def __init__(self, models: ModelList, parent=None):
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.setAutoRaise(True)
        self.models = models
        self.menu_ = ModelMenu(models, self)
        self.setMenu(self.menu_)
        models.changed.connect(self._show_current)
        self._show_current()

    @property
    def model_actions(self):
        return self.menu_.model_actions

    def action_for(self, model_id):
        return self.menu_.action_for(model_id)

    def current_name(self) -> str:
        info = self.models.current()
        return (info.name or info.id) if info else (self.models.current_id or NO_MODEL)

    def _show_current(self):
        self.setEnabled(not self.models.busy)  # while a model loads, choosing another is disabled
        self.setText(self.current_name())
        info = self.models.current()
        self.setToolTip(f"Model: {describe(info)} — click to switch" if info else "Choose a model")
