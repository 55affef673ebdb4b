"""How the window looks: the reading column's width, the light/dark theme and the font size.

Applied to the whole QApplication from Preferences (store state "app_settings").
"""

from typing import Any

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QWidget

# px at the system font size: the transcript and composer column; wider lines are hard to read.
# At another size the column scales with it, so a line holds the same words (not half at 20 pt).
READING_WIDTH = 760
THEMES = ("system", "light", "dark")

_DARK = {
    QPalette.ColorRole.Window: "#202124",
    QPalette.ColorRole.WindowText: "#e8eaed",
    QPalette.ColorRole.Base: "#17181a",
    QPalette.ColorRole.AlternateBase: "#2a2b2e",
    QPalette.ColorRole.Text: "#e8eaed",
    QPalette.ColorRole.Button: "#2d2e31",
    QPalette.ColorRole.ButtonText: "#e8eaed",
    QPalette.ColorRole.Highlight: "#4f7fd9",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#303134",
    QPalette.ColorRole.ToolTipText: "#e8eaed",
    QPalette.ColorRole.PlaceholderText: "#9aa0a6",
    QPalette.ColorRole.Link: "#8ab4f8",
    QPalette.ColorRole.Mid: "#5f6368",
    QPalette.ColorRole.Midlight: "#3c4043",
    QPalette.ColorRole.Dark: "#111213",
    QPalette.ColorRole.Light: "#5f6368",
    QPalette.ColorRole.BrightText: "#ffffff",
}
_LIGHT = {
    QPalette.ColorRole.Window: "#f3f3f3",
    QPalette.ColorRole.WindowText: "#1f1f1f",
    QPalette.ColorRole.Base: "#ffffff",
    QPalette.ColorRole.AlternateBase: "#f0f2f5",
    QPalette.ColorRole.Text: "#1f1f1f",
    QPalette.ColorRole.Button: "#f6f6f6",
    QPalette.ColorRole.ButtonText: "#1f1f1f",
    QPalette.ColorRole.Highlight: "#2f6fd6",
    QPalette.ColorRole.HighlightedText: "#ffffff",
    QPalette.ColorRole.ToolTipBase: "#fff8dc",
    QPalette.ColorRole.ToolTipText: "#1f1f1f",
    QPalette.ColorRole.PlaceholderText: "#6b6b6b",
    QPalette.ColorRole.Link: "#1a5fb4",
    QPalette.ColorRole.Mid: "#b8b8b8",
    QPalette.ColorRole.Midlight: "#dcdcdc",
    QPalette.ColorRole.Dark: "#9a9a9a",
    QPalette.ColorRole.Light: "#ffffff",
    QPalette.ColorRole.BrightText: "#000000",
}

_system: dict[str, Any] = {}  # the palette and font the app started with, to go back to "system"
_INDICATORS = (QStyle.PrimitiveElement.PE_IndicatorCheckBox, QStyle.PrimitiveElement.PE_IndicatorRadioButton)
_MENU_EDGES = (QStyle.PrimitiveElement.PE_PanelMenu, QStyle.PrimitiveElement.PE_FrameMenu)


class VisibleIndicators(QProxyStyle):
    """The app's style, with an outline around check boxes, radio buttons and menus on a dark
    palette (Fusion outlines them in a darker shade of the window: invisible when it is already dark),
    and dialog buttons without icons, as on macOS (the desktop's ✓ and ✗ drew dark on a dark palette)."""

    def styleHint(self, hint, option=None, widget=None, returnData=None):
        if hint == QStyle.StyleHint.SH_DialogButtonBox_ButtonsHaveIcons:
            return 0
        return super().styleHint(hint, option, widget, returnData)

    def drawPrimitive(self, element, option, painter, widget=None):
        super().drawPrimitive(element, option, painter, widget)
        if element in _MENU_EDGES and is_dark(option.palette):
            painter.save()  # a menu's edge, which is as dark as the window behind it otherwise
            painter.setPen(option.palette.color(QPalette.ColorRole.Mid))
            painter.drawRect(option.rect.adjusted(0, 0, -1, -1))
            painter.restore()
            return
        if element not in _INDICATORS or not is_dark(option.palette):
            return
        painter.save()
        painter.setRenderHint(painter.RenderHint.Antialiasing)
        painter.setPen(option.palette.color(QPalette.ColorRole.Light))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        box = option.rect.adjusted(1, 1, -1, -1)
        if element == QStyle.PrimitiveElement.PE_IndicatorRadioButton:
            painter.drawEllipse(box)
        else:
            painter.drawRoundedRect(box, 2, 2)
        painter.restore()


def _app() -> QApplication | None:
    app = QApplication.instance()
    return app if isinstance(app, QApplication) else None  # a QCoreApplication has no palette


def palette_for(theme: str) -> QPalette:
    if theme not in ("light", "dark"):
        app = _app()
        return QPalette(_system.get("palette", app.palette() if app else QPalette()))
    palette = QPalette()
    for role, colour in (_DARK if theme == "dark" else _LIGHT).items():
        palette.setColor(role, QColor(colour))
    disabled = QColor("#7f8389" if theme == "dark" else "#9a9a9a")
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return palette


def install_style() -> None:
    """Wrap the app's style once in VisibleIndicators (a dark system palette needs it too)."""
    app = _app()
    if app is not None and not isinstance(app.style(), VisibleIndicators):
        app.setStyle(VisibleIndicators(app.style().name()))


def apply(theme: str = "system", font_size: int = 0) -> None:
    """Set the app's palette and base font size (0: the system's size)."""
    app = _app()
    if app is None:
        return
    _system.setdefault("palette", QPalette(app.palette()))
    _system.setdefault("font", QFont(app.font()))
    install_style()
    app.setPalette(palette_for(theme))
    font = QFont(_system["font"])
    if font_size:
        font.setPointSize(int(font_size))
    app.setFont(font)


def system_point_size() -> int:
    """The font size the app started with (what Preferences calls "System size")."""
    app = _app()
    font = _system.get("font") or (app.font() if app is not None else QFont())
    return font.pointSize() if font.pointSize() > 0 else 10


def font_scale(font: QFont) -> float:
    """How much bigger `font` is than the system size (1.0 there, and when its size is not in points):
    what sizes drawn for the system size are scaled by."""
    size = font.pointSizeF()
    return size / system_point_size() if size > 0 else 1.0


def reading_width(font: QFont) -> int:
    """The reading column's widest, in px, for text in `font`."""
    return round(READING_WIDTH * font_scale(font))


class ReadingColumn(QWidget):
    """The centred column the transcript and the composer share: as wide as reading_width of its
    font allows, narrower when the window is."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setMaximumWidth(reading_width(self.font()))

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # Preferences › font size
            self.setMaximumWidth(reading_width(self.font()))


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128
