"""Serving shows in the status bar once the Server dialog is closed; a `chinwag serve` already on
this data folder is named (pid, address) by a banner at open and refused by File › Server…."""

import pytest

from app.core import serving
from tests.app.core.test_serving import other_process, write  # noqa: F401 (fixture)

pytestmark = pytest.mark.qt


def test_the_status_bar_says_where_the_window_serves_and_opens_the_dialog(qtbot, window):
    from app.gui.server_panel import ServerDialog

    button = window.serving_button
    assert not button.isVisible()
    window.server_control.start(port=0)
    qtbot.waitUntil(lambda: window.server_control.running, timeout=10_000)
    port = window.server_control.server.port
    assert button.isVisible() and button.text() == f"Serving 127.0.0.1:{port}"
    assert serving.current() is None  # its own record, not another server
    button.click()
    assert [d for d in window.dialogs.open_dialogs if isinstance(d, ServerDialog)]
    window.server_control.stop()
    qtbot.waitUntil(lambda: not button.isVisible(), timeout=10_000)


def test_a_chinwag_serve_on_this_data_folder_is_named_and_the_window_does_not_serve_beside_it(
    qtbot,
    qloop,
    store,
    engine,
    other_process,  # noqa: F811
):
    from tests.app.gui.test_bad_input import make_window

    write(other_process, serving.CLI, "http://127.0.0.1:8080/v1")
    w = make_window(qtbot, store, engine)
    said = [t for t in w.notices.texts() if "already serves this data folder" in t]
    assert said and said[0].startswith(f"chinwag serve (pid {other_process}) already serves this data folder at http")
    failed = []
    w.server_control.failed.connect(failed.append)
    w.server_control.start(port=0)
    qtbot.waitUntil(lambda: bool(failed), timeout=5000)
    assert not w.server_control.running
    assert failed == [
        f"chinwag serve (pid {other_process}) already serves this data folder at http://127.0.0.1:8080/v1: stop it there first."
    ]
