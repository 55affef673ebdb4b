"""A chip's label that gives way: it draws its text elided to the room it has (a long document name,
"too big for the context…" at the minimum window size) and never widens the composer; text() stays whole."""

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

MIN_CHARS = 4  # "big…": what a squeezed chip still shows of each label


class ElidingLabel(QLabel):
    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), MIN_CHARS * self.fontMetrics().averageCharWidth()), hint.height())

    def shown(self) -> str:
        """The text as drawn: elided to the label's width."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        align = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
        self.style().drawItemText(
            painter, self.contentsRect(), align, self.palette(), self.isEnabled(), self.shown(), self.foregroundRole()
        )
        painter.end()
