"""The window's one copy of the model list: every model engine.list_models() gave, the loaded
one and whether a model is loading. The Model menu and the header's picker both show it; what
they are asked for (a model, an import, a download…) are its signals, so each handler is
connected once."""

from PySide6.QtCore import QObject, Signal

from engine.types import ModelInfo


class ModelList(QObject):
    changed = Signal()  # the models, the current one or busy changed: menus rebuild
    modelChosen = Signal(str)  # a registry id
    importGgufRequested = Signal()
    addFolderRequested = Signal()
    downloadRequested = Signal()
    showFolderRequested = Signal()
    connectServerRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.models: list[ModelInfo] = []
        self.current_id: str | None = None
        self.busy = False  # a model is loading: choosing another is disabled

    def set_models(self, models, current_id=None):
        self.models = list(models)
        self.current_id = current_id
        self.changed.emit()

    def set_current(self, current_id):
        self.current_id = current_id
        self.changed.emit()

    def set_busy(self, busy: bool):
        self.busy = busy
        self.changed.emit()

    def get(self, model_id) -> ModelInfo | None:
        return next((m for m in self.models if m.id == model_id), None)

    def current(self) -> ModelInfo | None:
        return self.get(self.current_id)
