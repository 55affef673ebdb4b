"""Start-up: the window is painted before mlx_lm is imported; the model loads in the background."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.qt

SCRIPT = r"""
import json, sys, time
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.gui.window as W

record = {"events": []}
t0 = time.monotonic()
original = W.MainWindow.paintEvent

def paintEvent(self, event):
    if "painted" not in record:
        record["painted"] = time.monotonic() - t0
        record["visible_at_paint"] = self.isVisible()
        record["mlx_lm_at_paint"] = "mlx_lm" in sys.modules
        record["mlx_at_paint"] = "mlx" in sys.modules
        window = self
        window.bridge.loadProgress.connect(lambda p: record["events"].append(p.stage))
        window.bridge.stateChanged.connect(lambda s: record["events"].append("state:" + s))

        def poll():
            if window.bridge.state in ("ready", "error") or window.bridge.last_error:
                record["mlx_lm_later"] = "mlx_lm" in sys.modules
                record["state"] = window.bridge.state
                record["composer_ready"] = window.composer.is_ready()
                record["status"] = window.status.state_label.text()
                window.close()
            else:
                QTimer.singleShot(20, poll)

        QTimer.singleShot(0, poll)
    return original(self, event)

W.MainWindow.paintEvent = paintEvent
from app.gui.main import run_app
code = run_app([], model=sys.argv[1])
record["exit_code"] = code
print("RECORD " + json.dumps(record), flush=True)
"""


def test_window_paints_before_mlx_lm_is_imported(tiny_model_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tiny_model_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RECORD ")]
    assert lines, proc.stdout + proc.stderr
    record = json.loads(lines[-1][len("RECORD ") :])
    assert record["visible_at_paint"]
    assert record["mlx_lm_at_paint"] is False and record["mlx_at_paint"] is False
    assert record["mlx_lm_later"] is True
    assert record["state"] == "ready", record
    assert record["composer_ready"] and record["status"] == "Ready"
    assert "state:loading" in record["events"] and record["events"][-1] == "state:ready"
    assert "Loading the tokenizer" in record["events"] and "Loading weights" in record["events"]
    assert record["exit_code"] == 0


def test_importing_the_window_is_cheap():
    code = "import sys, app.gui.main, app.gui.window, app.gui.engine_bridge; print(sorted(m for m in ('mlx', 'mlx_lm', 'transformers') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
