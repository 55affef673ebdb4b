"""Small line icons drawn with QPainter in the palette's text colour: no icon theme or font
glyph is needed (Linux desktops often have neither for these)."""

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QFont, QGuiApplication, QIcon, QPainter, QPainterPath, QPalette, QPen, QPixmap

SIZE = 16  # px at the system font size; the drawings below are on this grid
MIN_SIZE = 12


def side_for(font: QFont) -> int:
    """An icon's side beside text in `font`: SIZE at the system size, scaled with the font size
    (at 20 pt a 16 px Copy button is a small target beside big text)."""
    from app.gui.theme import font_scale

    return max(MIN_SIZE, round(SIZE * font_scale(font)))


def _pen(colour):
    pen = QPen(colour, 1.4)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
    return pen


def _copy(p):
    p.drawRoundedRect(QRectF(5.5, 5.5, 8, 8.5), 1.5, 1.5)
    p.drawPolyline([QPointF(3.5, 10.5), QPointF(2.5, 10.5), QPointF(2.5, 2.5), QPointF(9.5, 2.5), QPointF(9.5, 3.5)])


def _edit(p):
    p.drawPolygon([QPointF(3, 13), QPointF(3.6, 10.2), QPointF(11, 2.8), QPointF(13.2, 5), QPointF(5.8, 12.4)])
    p.drawLine(QPointF(9.6, 4.2), QPointF(11.8, 6.4))


def _regenerate(p):
    path = QPainterPath()
    path.arcMoveTo(QRectF(3, 3, 10, 10), 60)
    path.arcTo(QRectF(3, 3, 10, 10), 60, 290)
    p.drawPath(path)
    p.drawPolyline([QPointF(10.2, 1.8), QPointF(10.6, 4.6), QPointF(13.2, 3.6)])


def _check(p):
    p.drawPolyline([QPointF(3, 8.5), QPointF(6.5, 12), QPointF(13, 4.5)])


def _attach(p):  # a paperclip
    path = QPainterPath(QPointF(10.5, 5))
    path.lineTo(10.5, 11)
    path.arcTo(QRectF(5.5, 8.5, 5, 5), 0, -180)
    path.lineTo(5.5, 4)
    path.arcTo(QRectF(5.5, 1.5, 7, 5), 180, -180)
    path.lineTo(12.5, 11.5)
    p.drawPath(path)


def _document(p):  # a page with a folded corner and lines of text
    p.drawPolyline([QPointF(9.5, 1.5), QPointF(3.5, 1.5), QPointF(3.5, 14.5), QPointF(12.5, 14.5), QPointF(12.5, 4.5)])
    p.drawPolyline([QPointF(9.5, 1.5), QPointF(9.5, 4.5), QPointF(12.5, 4.5), QPointF(9.5, 1.5)])
    for y in (7.5, 10, 12.5):
        p.drawLine(QPointF(5.5, y), QPointF(10.5, y))


_DRAW = {
    "copy": _copy,
    "edit": _edit,
    "regenerate": _regenerate,
    "copied": _check,
    "attach": _attach,
    "document": _document,
}


def icon(name: str, palette: QPalette | None = None, side: int = SIZE) -> QIcon:
    """The named icon, side px square, in normal and disabled colours."""
    palette = palette or QGuiApplication.palette()
    result = QIcon()
    ratio = QGuiApplication.primaryScreen().devicePixelRatio() if QGuiApplication.primaryScreen() else 1.0
    for mode, group in (
        (QIcon.Mode.Normal, QPalette.ColorGroup.Active),
        (QIcon.Mode.Disabled, QPalette.ColorGroup.Disabled),
    ):
        pixmap = QPixmap(int(side * ratio), int(side * ratio))
        pixmap.setDevicePixelRatio(ratio)
        pixmap.fill(Qt.GlobalColor.transparent)
        painter = QPainter(pixmap)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.scale(side / SIZE, side / SIZE)
        painter.setPen(_pen(palette.color(group, QPalette.ColorRole.WindowText)))
        _DRAW[name](painter)
        painter.end()
        result.addPixmap(pixmap, mode)
    return result


def set_icon(button, name: str) -> None:
    """Give a tool button the named icon at the size of its font."""
    side = side_for(button.font())
    button.setIconSize(QSize(side, side))
    button.setIcon(icon(name, side=side))
