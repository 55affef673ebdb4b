"""The model picker in the chat header: the loaded model's name; click for the same menu as
Model (every model engine.list_models() gives, server models grouped by server, and the
import/download/server actions), so the two never differ: both show one ModelList."""

from PySide6.QtCore import QPointF, QSize, Qt
from PySide6.QtGui import QPainter, QPalette, QPen
from PySide6.QtWidgets import QToolButton

from app.gui.models.menu import ModelMenu, describe
from app.gui.models.model_list import ModelList

NO_MODEL = "No model"
MIN_SHOWN = "Model…"  # what a squeezed picker still shows, at the least
CHEVRON = 8  # px wide: the ▾ that says it opens a menu (the style's own arrow was ~4 px)


class ModelPicker(QToolButton):
    def __init__(self, models: ModelList, parent=None):
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.setAutoRaise(False)  # a framed button (resources/style.qss #modelPicker), not plain text
        self.setAccessibleName("Model")
        self.models = models
        self._full = ""  # the model's whole name; the button shows it elided when squeezed
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
        self._full = self.current_name()
        self.setText(self._full)
        self.updateGeometry()
        self._elide()
        info = self.models.current()
        self.setToolTip(f"Model: {describe(info)} — click to switch" if info else "Choose a model")
        self.setAccessibleDescription(f"{self._full}: click to choose another model")

    def _chrome(self) -> int:
        """The button's width beyond its text: margins and the menu arrow."""
        return super().sizeHint().width() - self.fontMetrics().horizontalAdvance(self.text())

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(self._chrome() + self.fontMetrics().horizontalAdvance(self._full), hint.height())

    def minimumSizeHint(self) -> QSize:
        hint = self.sizeHint()
        least = self._chrome() + self.fontMetrics().horizontalAdvance(MIN_SHOWN)
        return QSize(min(hint.width(), least), hint.height())

    def paintEvent(self, event):
        super().paintEvent(event)
        painter = QPainter(self)  # the chevron, in the text's colour, in the room the style sheet's padding keeps
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        group = QPalette.ColorGroup.Active if self.isEnabled() else QPalette.ColorGroup.Disabled
        painter.setPen(QPen(self.palette().color(group, QPalette.ColorRole.ButtonText), 1.6))
        x, y = self.width() - 8 - CHEVRON, self.height() / 2 - CHEVRON / 4
        half = CHEVRON / 2
        painter.drawPolyline([QPointF(x, y), QPointF(x + half, y + half), QPointF(x + CHEVRON, y)])
        painter.end()

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._elide()

    def _elide(self):
        shown = self._full
        if self.width() < self.sizeHint().width():
            room = max(0, self.width() - self._chrome())
            shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, room)
        if shown != self.text():
            self.setText(shown)
