"""The chat header: the chat's title and the model picker share a narrow bar, both readable."""

import pytest

from engine.types import ModelInfo
from tests.app.gui.test_bad_input import make_window
from tests.app_helpers import FAKE_MODELS, FakeEngine, run, send

pytestmark = pytest.mark.qt

LONG_TITLE = "Planning the kitchen renovation budget"


def test_at_the_minimum_size_and_20_pt_a_long_model_name_elides_before_the_title(qtbot, qloop, store):
    from app.gui import theme
    from app.gui.settings.preferences import APP_KEY
    from app.gui.window import MIN_SIZE

    coder = ModelInfo(
        "coder", "Qwen2.5 Coder 14B Instruct (4-bit)", "/models/coder", "qwen2", 8 * 1024**3, "4-bit", 32768
    )
    engine = FakeEngine(models=FAKE_MODELS + [coder])
    window = make_window(qtbot, store, engine)
    header, picker = window.header, window.model_picker
    picker.action_for("coder").trigger()
    qtbot.waitUntil(lambda: picker.current_name() == coder.name, timeout=5000)
    send(qtbot, window, LONG_TITLE)
    qtbot.waitUntil(lambda: header.title() == LONG_TITLE, timeout=5000)  # a new chat is named by its first message
    full_name = picker.current_name()
    window.resize(*MIN_SIZE)
    try:
        store.set_state(APP_KEY, {"theme": "system", "font_size": 20, "default_model": ""})
        window.apply_app_settings()
        qtbot.waitUntil(lambda: window.width() == MIN_SIZE[0])
        # seen on X at 20 pt: the picker kept the whole model name and the title was "j…"
        qtbot.waitUntil(lambda: header.title_label.width() >= picker.width() > 0)
        assert len(header.title_label.text()) > 5  # more than a letter and "…"
        assert picker.text() != full_name and picker.text().endswith("…")
        assert full_name in picker.toolTip()
        left = picker.mapTo(header, picker.rect().topLeft()).x()
        assert left + picker.width() <= header.width()
        window.resize(3 * MIN_SIZE[0], MIN_SIZE[1])
        qtbot.waitUntil(lambda: picker.text() == full_name)  # room again: the whole name
    finally:
        theme.apply("system", 0)  # the QApplication is shared by every test
    window.close()
    run(qtbot, window.shutdown())
