"""Who serves the API on a data folder: `serving.json` names the process (the window's File › Server…
or `chinwag serve`), its pid and its URL while it serves. Both sides read it before they start, so
a second server on the same data folder (a second model loaded, kv/ shared) is refused in one line
that says where the first one is; a record left by a process that is gone is ignored.
"""

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from engine import paths
from engine.atomic import write_atomic

SERVING_FILE = "serving.json"
WINDOW_LOCK = "window.lock"  # held by the one window open on a data folder (app/gui/single_instance.py)
WINDOW, CLI = "the Chinwag window", "chinwag serve"


@dataclass(frozen=True)
class Serving:
    by: str  # WINDOW or CLI
    pid: int
    url: str

    def line(self) -> str:
        """'chinwag serve (pid 4242) already serves this data folder at http://127.0.0.1:8080/v1'."""
        return f"{self.by} (pid {self.pid}) already serves this data folder at {self.url}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process holds that pid: not ours, but alive
        return True
    return True


def _record(folder: Path) -> Path:
    return folder / SERVING_FILE


def current(folder: Path | None = None) -> Serving | None:
    """Another live process serving this data folder (None: nobody, this process, or a stale record)."""
    path = _record(folder or paths.data_dir_path())
    try:
        data = json.loads(path.read_text("utf-8"))
        found = Serving(str(data["by"]), int(data["pid"]), str(data["url"]))
    except (OSError, ValueError, KeyError, TypeError):  # none, or unreadable: nobody says they serve
        return None
    if found.pid == os.getpid() or found.pid <= 0 or not _alive(found.pid):
        return None
    return found


def claim(by: str, url: str, folder: Path | None = None) -> None:
    """Say that this process serves the data folder at `url` (call once it listens)."""
    data = {"by": by, "pid": os.getpid(), "url": url}
    write_atomic(_record(folder or paths.data_dir()), json.dumps(data) + "\n")


def release(folder: Path | None = None) -> None:
    """This process no longer serves: its record goes (another process's is left alone)."""
    path = _record(folder or paths.data_dir_path())
    try:
        if int(json.loads(path.read_text("utf-8")).get("pid", 0)) == os.getpid():
            path.unlink()
    except (OSError, ValueError, AttributeError, TypeError):
        pass


def window_open(folder: Path | None = None) -> bool:
    """A Chinwag window holds this data folder (its lock is taken)."""
    path = (folder or paths.data_dir_path()) / WINDOW_LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file: no window has opened here
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock if we took it
    return False
