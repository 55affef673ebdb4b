"""The model picker in the chat header: the loaded model's name; click for every model the
Model menu lists (the same engine.list_models(), so server models appear too)."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QMenu, QToolButton

from app.model_menu import describe

NO_MODEL = "No model"


class ModelPicker(QToolButton):
    modelChosen = Signal(str)  # a registry id
    downloadRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.setAutoRaise(True)
        self.menu_ = QMenu(self)
        self.menu_.setToolTipsVisible(True)
        self.setMenu(self.menu_)
        self._models = []
        self._current = None
        self._busy = False
        self.model_actions = []
        self._rebuild()

    def set_models(self, models, current_id=None):
        self._models = list(models)
        self._current = current_id
        self._rebuild()

    def set_current(self, current_id):
        self._current = current_id
        self._rebuild()

    def set_busy(self, busy: bool):
        """While a model loads, choosing another is disabled."""
        self._busy = busy
        self.setEnabled(not busy)

    def current_name(self) -> str:
        info = next((m for m in self._models if m.id == self._current), None)
        return (info.name or info.id) if info else (self._current or NO_MODEL)

    def _rebuild(self):
        self.setText(self.current_name())
        info = next((m for m in self._models if m.id == self._current), None)
        self.setToolTip(f"Model: {describe(info)} — click to switch" if info else "Choose a model")
        menu = self.menu_
        menu.clear()
        self.model_actions = []
        if not self._models:
            menu.addAction("No models found yet").setEnabled(False)
        for info in self._models:
            action = menu.addAction(describe(info))
            action.setCheckable(True)
            action.setChecked(info.id == self._current)
            action.setData(info.id)
            usable = info.status != "unusable"
            action.setEnabled(usable)
            action.setToolTip(info.reason if not usable else (info.path or info.id))
            action.triggered.connect(lambda _checked=False, mid=info.id: self._choose(mid))
            self.model_actions.append(action)
        menu.addSeparator()
        menu.addAction("Download Models…", self.downloadRequested.emit)

    def _choose(self, model_id):
        self._rebuild()  # the check stays on the loaded model until the new one has loaded
        if model_id != self._current:
            self.modelChosen.emit(model_id)

    def action_for(self, model_id):
        return next((a for a in self.model_actions if a.data() == model_id), None)
