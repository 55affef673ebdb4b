"""The window's one copy of the model list: every model engine.list_models() gave, the loaded
one and whether a model is loading. The Model menu and the header's picker both show it; what
they are asked for (a model, an import, a download…) are its signals, so each handler is
connected once."""

from collections.abc import Iterable

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

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.models: list[ModelInfo] = []
        self.current_id: str | None = None
        self.busy = False  # a model is loading: choosing another is disabled

    def set_models(self, models: Iterable[ModelInfo], current_id: str | None = None) -> None:
        self.models = list(models)
        self.current_id = current_id
        self.changed.emit()

    def set_current(self, current_id: str | None) -> None:
        self.current_id = current_id
        self.changed.emit()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.changed.emit()

    def get(self, model_id: str | None) -> ModelInfo | None:
        return next((m for m in self.models if m.id == model_id), None)

    def current(self) -> ModelInfo | None:
        return self.get(self.current_id)
