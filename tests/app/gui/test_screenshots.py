"""`python -m app.gui.screenshots` renders the window and the open Model menu."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.qt


def test_screenshots_are_written(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-m", "app.gui.screenshots", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    from PySide6.QtGui import QImage

    for name in ("window.png", "model-menu.png", "welcome.png", "window-dark.png"):
        image = QImage(str(tmp_path / name))
        assert not image.isNull() and image.width() >= 1000 and image.height() >= 700
    for name in ("code-block.png", "versions.png", "catalogue.png"):
        assert not QImage(str(tmp_path / name)).isNull(), name
    # The menu picture differs from the plain window where the menu is drawn.
    assert QImage(str(tmp_path / "window.png")) != QImage(str(tmp_path / "model-menu.png"))
    # Dark mode is dark: the transcript's background is darker than the light picture's.
    light, dark = QImage(str(tmp_path / "window.png")), QImage(str(tmp_path / "window-dark.png"))
    at = (light.width() * 2 // 3, light.height() // 2)
    assert dark.pixelColor(*at).lightness() < 100 < light.pixelColor(*at).lightness()
