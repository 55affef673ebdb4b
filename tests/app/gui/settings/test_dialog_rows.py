"""The settings dialogs' rows: as narrow as their fields need at a large font size (long
explanations wrap), and scrolled by the wheel without changing the fields it passes over."""

import pytest

pytestmark = pytest.mark.qt


def test_at_20_pt_preferences_is_no_wider_than_its_fields_need(qtbot, window, store):
    from PySide6.QtGui import QFontMetrics

    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY

    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": 20, "default_model": ""})
        window.apply_app_settings()
        dialog = window.dialogs.preferences_dialog()
        dialog.open()
        qtbot.waitUntil(dialog.isVisible)
        chars = dialog.width() / QFontMetrics(dialog.font()).averageCharWidth()
        # seen on X: 1,195 px at 20 pt, as wide as the checkboxes' one-line explanations
        assert chars < 70
        assert dialog.prefill_box.text() == "Read the message while I type"
        dialog.reject()
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
        window._applied_look = ("system", 0)


def test_the_wheel_scrolls_the_rows_and_leaves_the_field_under_it_alone(qtbot, window):
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    dialog = window.dialogs.preferences_dialog()
    dialog.open()
    qtbot.waitUntil(dialog.isVisible)
    dialog.resize(dialog.width(), 300)  # short: the rows scroll
    bar = dialog.rows_scroll.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    box = dialog.fields["temperature"]
    before = box.value()
    dialog.ok_button.setFocus()

    def wheel(widget):
        centre = QPointF(widget.rect().center())
        event = QWheelEvent(
            centre,
            QPointF(widget.mapToGlobal(centre.toPoint())),
            QPoint(0, 0),
            QPoint(0, -120),  # one notch down
            Qt.MouseButton.NoButton,
            Qt.KeyboardModifier.NoModifier,
            Qt.ScrollPhase.NoScrollPhase,
            False,
        )
        QApplication.sendEvent(widget, event)

    wheel(box)
    assert box.value() == before  # seen on X: scrolling through Preferences set it to 0.00
    assert bar.value() > 0
    box.setFocus()
    qtbot.waitUntil(box.hasFocus)
    wheel(box)
    assert box.value() != before  # a field the user is in still takes the wheel
    dialog.reject()
