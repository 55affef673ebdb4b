"""Honest start-up progress: the import's stages, the tokenizer, the weights layer by layer,
and a window that keeps handling events while the engine imports MLX."""

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine import Engine
from engine.types import LOADED_STAGE
from tests.engine.models.gguf.test_importer import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[3]


def _load(spec):
    events = []

    async def main():
        engine = Engine()
        try:
            await engine.load_model(str(spec), progress=events.append)
        finally:
            await engine.close()

    asyncio.run(main())
    return events


def test_weights_load_with_real_progress(tiny_model_path):
    events = _load(tiny_model_path)
    stages = [e.stage for e in events]
    assert stages.index("Loading the tokenizer") < stages.index("Loading weights")
    weights = [e for e in events if e.stage == "Loading weights"]
    # Not "0% then done": one step per layer (the tiny model has two) plus the rest.
    assert len(weights) >= 4 and weights[0].done == 0
    done = [e.done for e in weights]
    assert done == sorted(done) and len(set(done)) == len(done)
    assert all(e.total == weights[0].total > 0 for e in weights) and done[-1] == weights[0].total
    assert stages[-1] == LOADED_STAGE


def test_first_load_of_a_gguf_shows_the_import_stages(tiny_model_path, tmp_path):
    gguf = write_tiny_gguf(tiny_model_path, tmp_path / "Tiny-Llama.F32.gguf")
    events = _load(gguf)
    imports = [e for e in events if e.stage.startswith("Importing the model (first time only): ")]
    assert len(imports) >= 4 and imports[-1].done == imports[-1].total
    fractions = [e.done / e.total for e in imports]
    assert fractions == sorted(fractions)
    # The conversion, the long step, moves in real fractions between its stage marks.
    converting = [e.done for e in imports if e.stage.endswith("converting weights")]
    assert len(converting) >= 3 and any(2 < d < 3 for d in converting) and converting[-1] == 3
    assert {"reading GGUF", "converting weights", "building tokenizer", "writing model"} <= {
        e.stage.split(": ", 1)[1] for e in imports
    }
    # The import comes before the weights load, which then has its own progress.
    stages = [e.stage for e in events]
    assert max(i for i, s in enumerate(stages) if s.startswith("Importing")) < stages.index("Loading weights")
    again = [e.stage for e in _load(gguf)]  # second time: the imported folder is reused
    assert "Loading weights" in again and not any("converting" in s for s in again)


HEARTBEAT = r"""
import importlib.abc, json, sys, threading, time
record = {"importer": None, "ticks_during_import": 0}
importing = threading.Event()

class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "mlx_lm" and record["importer"] is None:
            record["importer"] = threading.current_thread().name
            importing.set()
        return None

sys.meta_path.insert(0, Spy())
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
import app.gui.window as W
original = W.MainWindow.__init__

def init(self, *args, **kwargs):
    original(self, *args, **kwargs)
    window = self
    timer = QTimer(self)
    timer.setInterval(10)

    def beat():  # the GUI thread handling events while the engine thread imports mlx_lm
        # Until mlx_lm's __init__ has run to its end (`load` is its last name): mlx_lm.utils enters
        # sys.modules a few ms in, long before its transformers import (the second) is done.
        if importing.is_set() and not hasattr(sys.modules.get("mlx_lm"), "load"):
            record["ticks_during_import"] += 1
        if window.bridge.state in ("ready", "error"):
            record["state"] = window.bridge.state
            timer.stop()
            window.close()

    timer.timeout.connect(beat)
    timer.start()
    self._heartbeat = timer

W.MainWindow.__init__ = init
from app.gui.main import run_app
run_app([], model=sys.argv[1])
print("RECORD " + json.dumps(record), flush=True)
"""


@pytest.mark.qt
def test_window_keeps_handling_events_while_the_engine_imports_mlx(tiny_model_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", HEARTBEAT, str(tiny_model_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RECORD ")]
    assert lines, proc.stdout + proc.stderr
    record = json.loads(lines[-1][len("RECORD ") :])
    assert record["state"] == "ready"
    # mlx_lm (seconds of imports) is imported on the engine thread, never the window's...
    assert record["importer"] != "MainThread", record
    # ...so the window's event loop kept running (and painting) during that import.
    assert record["ticks_during_import"] > 0, record
