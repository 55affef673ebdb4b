"""The Qt-free half of the code never imports PySide6: the engine, and the app's core, documents,
tools, transcripts, server and CLI (the PDF writer imports Qt inside its function, when a pdf is asked for). The modules are imported one by one
in a fresh interpreter, checking after each, so the first one that brings Qt is named."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QT_FREE = ["engine", "app/core", "app/chat", "app/documents", "app/tools", "app/transcripts", "app/server", "app/cli"]

SCRIPT = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    qt = sorted(m for m in sys.modules if m.split(".")[0] == "PySide6")
    if qt:
        print(json.dumps([name, qt[:3]]))
        break
else:
    print(json.dumps(None))
"""


def first_qt_import(names: list[str]):
    """[module, the PySide6 modules it brought] for the first of names that imports Qt, or None."""
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT), json.dumps(names)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def qt_free_modules() -> list[str]:
    names = []
    for folder in QT_FREE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            names.append(name)
    return names


def test_the_list_covers_every_folder():
    names = qt_free_modules()
    assert {"engine", "engine.local.session", "app.core.store", "app.cli.main", "app.server.api"} <= set(names)
    assert "app.transcripts.export_pdf" in names
    assert len(names) > 60


def test_qt_free_modules_never_import_pyside6():
    assert first_qt_import(qt_free_modules()) is None


def test_the_check_sees_qt():
    found = first_qt_import(["engine.text", "app.gui.theme", "app.core.store"])
    assert found is not None and found[0] == "app.gui.theme" and found[1]
