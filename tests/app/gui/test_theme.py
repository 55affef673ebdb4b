"""The dark theme: an unchecked check box is still visible on the dark window."""

import pytest
from PySide6.QtGui import QColor, QPalette

pytestmark = pytest.mark.qt


def contrast(image, rect, background: QColor) -> int:
    """The largest lightness difference from the background inside rect."""
    return max(
        abs(image.pixelColor(x, y).lightness() - background.lightness())
        for x in range(rect.left(), rect.right() + 1)
        for y in range(rect.top(), rect.bottom() + 1)
    )


def test_an_unchecked_box_shows_on_the_dark_theme(qtbot):
    from PySide6.QtWidgets import QCheckBox, QStyle, QStyleOptionButton

    from app.gui import theme

    try:
        theme.apply("dark", 0)
        box = QCheckBox("Read my message ahead while I type")
        qtbot.addWidget(box)
        box.show()
        qtbot.waitExposed(box)
        option = QStyleOptionButton()
        box.initStyleOption(option)
        indicator = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
        image = box.grab().toImage()
        window = box.palette().color(QPalette.ColorRole.Window)
        box.setChecked(True)
        checked = box.grab().toImage()
        # The empty box stands out from the window about as much as the checked one does.
        assert contrast(image, indicator, window) >= 40
        assert contrast(checked, indicator, window) >= 40
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test


def test_the_attach_icon_follows_the_theme(qtbot):
    from app.gui import theme
    from app.gui.composer import Composer

    def ink(button) -> int:
        """The lightness of the icon's drawn (opaque) pixels."""
        image = button.icon().pixmap(16, 16).toImage()
        seen = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
        return max(c.lightness() for c in seen if c.alpha() > 200)

    composer = Composer()
    qtbot.addWidget(composer)
    try:
        theme.apply("light", 0)
        qtbot.waitUntil(lambda: ink(composer.attach_button) < 128)
        theme.apply("dark", 0)  # dark ink on a dark window would be invisible
        qtbot.waitUntil(lambda: ink(composer.attach_button) > 128)
    finally:
        theme.apply("system", 0)


def test_a_menu_has_a_visible_edge_on_the_dark_theme(qtbot):
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QMenu

    from app.gui import theme

    try:
        theme.apply("dark", 0)
        menu = QMenu()
        qtbot.addWidget(menu)
        menu.addAction("Copy Message")
        menu.addAction("Fork from Here")
        menu.adjustSize()
        image = menu.grab().toImage()  # drawn as it would pop up (a popup grabs the keyboard)
        window = menu.palette().color(QPalette.ColorRole.Window)
        edge = QRect(0, image.height() // 2, 1, 1)  # the left edge, half-way down
        assert contrast(image, edge, window) >= 40
    finally:
        theme.apply("system", 0)


def test_dialog_buttons_carry_no_icons_even_where_the_desktop_gives_them_some(qtbot):
    """The desktop's ✓ and ✗ drew dark on the dark theme; macOS shows none."""
    from PySide6.QtWidgets import QDialogButtonBox, QProxyStyle, QStyle

    from app.gui.theme import VisibleIndicators

    class IconButtons(QProxyStyle):  # a desktop whose dialog buttons carry icons
        def styleHint(self, hint, option=None, widget=None, returnData=None):
            if hint == QStyle.StyleHint.SH_DialogButtonBox_ButtonsHaveIcons:
                return 1
            return super().styleHint(hint, option, widget, returnData)

    desktop = IconButtons("Fusion")
    ours = VisibleIndicators(IconButtons("Fusion"))
    icons = {}
    for name, style in (("desktop", desktop), ("ours", ours)):
        box = QDialogButtonBox()
        qtbot.addWidget(box)
        box.setStyle(style)
        box.setStandardButtons(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        icons[name] = not box.button(QDialogButtonBox.StandardButton.Ok).icon().isNull()
    assert icons == {"desktop": True, "ours": False}
