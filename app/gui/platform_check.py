"""Before Qt starts on Linux: can its xcb platform plugin load? If not, say which system
packages to install (one line, exit 2) instead of Qt's "could not load the Qt platform
plugin" abort."""

import ctypes
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path

# The system libraries PySide6's xcb plugin needs that a minimal install may lack:
# soname -> (Debian/Ubuntu package, Fedora package).
XCB_PACKAGES = {
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
}
_SONAME = re.compile(r"(lib[\w.+-]+\.so(?:\.\d+)*)")


def uses_xcb(environ: Mapping[str, str] = os.environ) -> bool:
    """Will Qt try its xcb plugin? (Linux, and QT_QPA_PLATFORM unset, or naming xcb.)"""
    if not sys.platform.startswith("linux"):
        return False
    platform = environ.get("QT_QPA_PLATFORM", "")
    if platform:
        return bool(platform.split(":")[0].split(";")[0] == "xcb")
    return not environ.get("WAYLAND_DISPLAY")  # a Wayland session uses Qt's wayland plugin


def _loads(name: str) -> str:
    """ "" if the library loads, else the loader's reason."""
    try:
        ctypes.CDLL(name)
        return ""
    except OSError as e:
        return str(e)


def missing_libraries() -> list[str]:
    """Sonames the xcb plugin needs that the loader cannot open."""
    missing = [name for name in XCB_PACKAGES if _loads(name)]
    if missing:
        return missing
    # Everything known loads: try the plugin itself for a library this table does not know.
    import PySide6

    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    reason = _loads(str(plugin)) if plugin.exists() else ""
    found = _SONAME.search(reason) if reason else None
    return [found.group(1)] if found and found.group(1) != "libqxcb.so" else []


def install_hint(missing: list[str]) -> str:
    debian = sorted({XCB_PACKAGES.get(m, (m, m))[0] for m in missing})
    fedora = sorted({XCB_PACKAGES.get(m, (m, m))[1] for m in missing})
    return (
        f"the window cannot open: Qt's xcb platform needs {', '.join(missing)}; install it with "
        f"sudo apt-get install {' '.join(debian)} (Debian/Ubuntu) or sudo dnf install {' '.join(fedora)} (Fedora)"
    )


def xcb_problem(environ: Mapping[str, str] = os.environ) -> str:
    """One line saying what to install, or "" when the window can start."""
    if not uses_xcb(environ):
        return ""
    missing = missing_libraries()
    return install_hint(missing) if missing else ""
