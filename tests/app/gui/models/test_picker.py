"""The model picker in the chat header: shows the loaded model, lists what the Model menu
lists (server models too), switches, and is disabled while a model loads."""

import pytest

from engine.types import ModelInfo
from tests.app.gui.test_bad_input import make_window
from tests.app_helpers import FAKE_MODELS, FakeEngine, run

pytestmark = pytest.mark.qt


def test_picker_shows_and_switches_the_model(qtbot, window, engine):
    picker = window.model_picker
    assert picker.isVisible() and picker.text().startswith("Fake Small")
    assert [a.data() for a in picker.model_actions] == [a.data() for a in window.model_menu.model_actions]
    assert picker.action_for("fake-small").isChecked()
    assert not picker.action_for("broken").isEnabled()
    assert picker.action_for("broken").toolTip() == "config.json is missing"

    picker.action_for("fake-big").trigger()
    qtbot.waitUntil(lambda: engine.current_model is not None and engine.current_model.id == "fake-big", timeout=5000)
    qtbot.waitUntil(lambda: picker.text().startswith("Fake Big"), timeout=5000)
    assert picker.action_for("fake-big").isChecked() and not picker.action_for("fake-small").isChecked()
    assert window.model_menu.action_for("fake-big").isChecked()  # the Model menu follows


def test_picking_the_loaded_model_again_loads_nothing(qtbot, window, engine):
    picker = window.model_picker
    loads = []
    window.bridge.loadProgress.connect(loads.append)
    picker.action_for("fake-small").trigger()
    window.model_menu.action_for("fake-small").trigger()
    qtbot.wait(50)  # a load would have reported by now (the fake reports before it awaits)
    assert loads == [] and window.bridge.state != "loading"
    assert picker.action_for("fake-small").isChecked() and window.model_menu.action_for("fake-small").isChecked()


def test_picker_is_busy_while_loading_and_lists_server_models(qtbot, qloop, store):
    server = ModelInfo(
        "studio/qwen3-32b", "qwen3-32b on studio", "http://studio:8080/v1", source="server", server="studio"
    )
    engine = FakeEngine(models=FAKE_MODELS + [server])
    engine.load_delay = 0.3
    w = make_window(qtbot, store, engine)
    picker = w.model_picker
    assert picker.action_for("studio/qwen3-32b").text() == "qwen3-32b"  # under its server, as in Model
    picker.action_for("studio/qwen3-32b").trigger()
    qtbot.waitUntil(lambda: not picker.isEnabled(), timeout=5000)
    qtbot.waitUntil(lambda: picker.isEnabled() and picker.text().startswith("qwen3-32b on studio"), timeout=5000)
    w.close()
    run(qtbot, w.shutdown())


def test_picker_download_entry_opens_the_download_dialog(qtbot, window):
    picker_texts = [a.text() for a in window.model_picker.menu_.actions()]
    assert picker_texts == [a.text() for a in window.model_menu.actions()]  # the same menu
    action = next(a for a in window.model_picker.menu_.actions() if a.text() == "Download from Hugging Face…")
    action.trigger()
    qtbot.waitUntil(lambda: window.dialogs.download is not None and window.dialogs.download.isVisible(), timeout=3000)
    window.dialogs.download.reject()


def test_picker_sits_in_the_chat_header(window):
    assert window.model_picker.parent() is window.header


def test_a_server_without_models_is_named_never_listed_as_name_slash(qtbot, qloop, store):
    down = ModelInfo(
        "bogus/",
        "bogus",
        "http://127.0.0.1:9/v1",
        status="unusable",
        source="server",
        server="bogus",
        reason="unreachable: connection refused at http://127.0.0.1:9/v1 (is the server running?)",
    )
    w = make_window(qtbot, store, FakeEngine(models=FAKE_MODELS + [down]))
    for menu in (w.model_menu, w.model_picker.menu_):
        texts = [a.text() for a in menu.actions()]
        assert "bogus" in texts and not any("bogus/" in text for text in texts)  # the server's name, a section
        entry = menu.action_for("bogus/")
        assert entry.text() == "Not reachable" and not entry.isEnabled() and "connection refused" in entry.toolTip()
    assert "bogus" not in w.model_picker.text()
    w.close()
    run(qtbot, w.shutdown())


def test_a_server_that_refuses_the_key_is_not_usable_not_unreachable(qtbot, qloop, store, chinwag_home):
    from engine.remote import servers
    from tests.remote_standin import StandIn

    with StandIn(api_key="right-key") as s:
        saved = servers.add_server("lab", s.url, "wrong-key")
        [down] = servers.models_of(saved)  # what the engine lists for it
    w = make_window(qtbot, store, FakeEngine(models=FAKE_MODELS + [down]))
    entry = w.model_menu.action_for("lab/")
    # seen: "Not reachable" for a server that answered and refused the key
    assert entry.text() == "Not usable" and not entry.isEnabled()
    assert "refused the API key" in entry.toolTip() and "wrong-key" not in entry.toolTip()
    w.close()
    run(qtbot, w.shutdown())


def test_continue_is_offered_only_while_a_model_on_this_computer_is_loaded(qtbot, qloop, store):
    from app.core.settings import DEFAULTS_KEY
    from tests.app_helpers import send

    server = ModelInfo(
        "studio/qwen3-32b", "qwen3-32b on studio", "http://studio:8080/v1", source="server", server="studio"
    )
    engine = FakeEngine(models=FAKE_MODELS + [server], reply="one two three four five six")
    w = make_window(qtbot, store, engine)
    store.set_state(DEFAULTS_KEY, {"max_tokens": 3})
    send(qtbot, w, "count")
    reply = w.chat_view.message_widgets()[-1]
    assert "hit max tokens" in reply.stats_label.text()
    qtbot.waitUntil(reply.continue_button.isVisible, timeout=2000)
    run(qtbot, w.bridge.load_model("studio/qwen3-32b"))
    qtbot.waitUntil(lambda: not reply.continue_button.isVisible(), timeout=3000)  # a server cannot write on
    run(qtbot, w.bridge.load_model("fake-small"))
    qtbot.waitUntil(reply.continue_button.isVisible, timeout=3000)
    w.close()
    run(qtbot, w.shutdown())


def test_the_picker_looks_like_a_control_with_a_frame_a_chevron_and_a_name(qtbot, window):
    from PySide6.QtGui import QColor

    picker = window.model_picker
    assert not picker.autoRaise()
    assert picker.accessibleName() == "Model" and picker.accessibleDescription().startswith("Fake Small")
    image = picker.grab().toImage()
    w, h = image.width(), image.height()
    header = window.header.grab().toImage()
    behind = QColor(header.pixel(2, 2)).lightness()  # the header's own background

    def ink(x, y):
        return abs(QColor(image.pixel(x, y)).lightness() - behind)

    # A frame: the middle of each edge differs from the header behind it (plain text would not).
    assert min(ink(w // 2, 0), ink(w // 2, h - 1), ink(0, h // 2), ink(w - 1, h // 2)) > 20
    # The chevron: ink across at least 6 px of columns in its corner (the style's arrow was ~4 px).
    fill = QColor(image.pixel(w - 4, h // 2)).lightness()
    columns = [
        x for x in range(w - 22, w - 4) if any(abs(QColor(image.pixel(x, y)).lightness() - fill) > 60 for y in range(h))
    ]
    assert len(columns) >= 6, columns


def test_the_picker_answers_the_pointer(qtbot, window):
    from PySide6.QtCore import Qt

    picker = window.model_picker
    before = picker.grab().toImage()
    picker.setAttribute(Qt.WidgetAttribute.WA_UnderMouse, True)  # what entering it sets (offscreen has no pointer)
    try:
        assert picker.grab().toImage() != before  # the hover frame, in the highlight colour
    finally:
        picker.setAttribute(Qt.WidgetAttribute.WA_UnderMouse, False)
