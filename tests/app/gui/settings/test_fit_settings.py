"""The window's memory limit (Preferences) and per-model KV cache setting (issue 32 items 1 and 4):
given to engine.configure before every load, a change loads the model again, a refused value is
one line."""

import pytest

from app.gui.settings.preferences import APP_KEY
from engine.types import KVQuantization
from tests.app_helpers import run

pytestmark = pytest.mark.qt


def preferences(qtbot, window):
    dialog = window.dialogs.preferences_dialog()
    qtbot.waitUntil(dialog.isVisible, timeout=3000)
    return dialog


def test_the_start_up_load_is_configured_with_the_defaults(window, engine):
    assert engine.configured == [(None, None)]  # full precision, what the machine has


def test_a_memory_limit_and_8_bit_kv_reload_the_model_with_them(qtbot, window, engine, store):
    dialog = preferences(qtbot, window)
    dialog.memory_edit.setText("6GB")
    dialog.kv_bits.setCurrentIndex(dialog.kv_bits.findData(8))
    dialog.kv_group.setCurrentIndex(dialog.kv_group.findData(32))
    dialog.accept()
    qtbot.waitUntil(lambda: len(engine.configured) == 2 and window.bridge.state == "ready", timeout=5000)
    assert engine.configured[-1] == (KVQuantization(8, 32), 6 * 10**9)
    assert engine.current_model.id == "fake-small"  # loaded again
    assert store.get_state(APP_KEY)["kv_cache"] == {"fake-small": {"bits": 8, "group_size": 32}}


def test_the_kv_setting_belongs_to_its_model(qtbot, window, engine, store):
    store.set_state(APP_KEY, {"kv_cache": {"fake-small": {"bits": 4, "group_size": 64}}})
    run(qtbot, window.bridge.load_model("fake-big"))
    assert engine.configured[-1] == (None, None)  # Fake Big has no setting of its own
    run(qtbot, window.bridge.load_model("fake-small"))
    assert engine.configured[-1] == (KVQuantization(4, 64), None)


def test_a_refused_memory_limit_is_one_line_and_the_dialog_stays(qtbot, window, engine):
    dialog = preferences(qtbot, window)
    dialog.memory_edit.setText("banana")
    dialog.accept()
    assert dialog.isVisible()
    assert dialog.fit_error.isVisible() and "\n" not in dialog.fit_error.text()
    assert dialog.fit_error.text().startswith("Preferences › Memory limit must be a size such as 6GB")
    assert engine.configured == [(None, None)]  # nothing saved, nothing loaded again
    dialog.reject()


def test_unchanged_settings_load_nothing_again(qtbot, window, engine):
    dialog = preferences(qtbot, window)
    dialog.accept()
    qtbot.wait(50)
    assert engine.configured == [(None, None)]
