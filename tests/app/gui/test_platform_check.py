"""`chinwag` on a Linux without the xcb libraries: one line naming the packages, exit 2."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.gui.platform_check import XCB_PACKAGES, install_hint, uses_xcb, xcb_problem

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb platform is Linux's")
def test_missing_xcb_library_says_what_to_install(tmp_path):
    # Simulate a machine without libxcb-icccm4 and libxcb-keysyms1: broken stand-ins come first.
    for name in ("libxcb-icccm.so.4", "libxcb-keysyms.so.1"):
        (tmp_path / name).write_bytes(b"not a library")
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), QT_QPA_PLATFORM="xcb", DISPLAY=":987", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.main"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("chinwag: error: the window cannot open")
    # Other xcb libraries may be missing on a bare machine too: these two must be named.
    debian, _, fedora = line.partition("sudo dnf install")
    assert "sudo apt-get install" in debian and "libxcb-icccm4" in debian and "libxcb-keysyms1" in debian
    assert "xcb-util-keysyms" in fedora and "xcb-util-wm" in fedora
    assert "could not load the qt platform plugin" not in proc.stderr.lower()


def test_only_xcb_is_checked():
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen"})
    assert not uses_xcb({"QT_QPA_PLATFORM": "wayland"})
    assert uses_xcb({"QT_QPA_PLATFORM": "xcb"}) == sys.platform.startswith("linux")
    assert not uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})
    assert xcb_problem({"QT_QPA_PLATFORM": "offscreen"}) == ""


def test_every_library_names_a_package_for_both_families():
    for soname, (debian, fedora) in XCB_PACKAGES.items():
        assert soname.startswith("lib") and ".so." in soname and debian and fedora
    hint = install_hint(["libxcb-cursor.so.0"])
    assert "libxcb-cursor0" in hint and "xcb-util-cursor" in hint and "\n" not in hint
