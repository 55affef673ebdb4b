"""Help › About: the version, the data folder, and the log one click away."""

import pytest

pytestmark = pytest.mark.qt


def test_about_names_the_version_and_data_folder_and_opens_the_log(qtbot, window, monkeypatch):
    from PySide6.QtWidgets import QLabel

    import app.gui.window_dialogs as window_dialogs
    from app.core.version import app_version
    from engine import paths
    from engine.log import LOG_FILE

    opened = []
    monkeypatch.setattr(window_dialogs, "open_url", lambda url: opened.append(url.toLocalFile()) or True)
    (paths.data_dir() / LOG_FILE).touch()
    assert window.about_action.text() == "About Chinwag"
    window.about_action.trigger()
    dialog = window.dialogs.open_dialogs[-1]
    texts = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert app_version() in texts and str(paths.data_dir_path()) in texts
    dialog.log_button.click()
    dialog.folder_button.click()
    assert opened == [str(paths.data_dir_path() / LOG_FILE), str(paths.data_dir_path())]
    dialog.reject()


def test_about_says_so_when_nothing_can_open_the_log(qtbot, window, monkeypatch):
    """Without a file manager (Qt finds no launcher) the button says why nothing opened, and where the file is."""
    from PySide6.QtWidgets import QLabel

    import app.gui.window_dialogs as window_dialogs
    from engine import paths
    from engine.log import LOG_FILE

    monkeypatch.setattr(window_dialogs, "open_url", lambda url: False)
    (paths.data_dir() / LOG_FILE).touch()
    window.about_action.trigger()
    dialog = window.dialogs.open_dialogs[-1]
    dialog.show()
    assert not dialog.failed.isVisible()
    dialog.log_button.click()
    assert dialog.failed.isVisible()
    assert f"Could not open {paths.data_dir_path() / LOG_FILE}" in dialog.failed.text()
    for label in dialog.findChildren(QLabel):  # the dialog grew: no label squeezed below its text
        assert label.height() >= label.heightForWidth(label.width()), label.text()
    dialog.reject()
