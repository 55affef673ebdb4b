"""Where Chinwag keeps its data: platformdirs' user data dir, or $CHINWAG_HOME.

The data folder and its subfolders are private (0700): conversations, KV caches and the
log hold chat text. Files in it are created 0600 by the modules that write them.
"""

import os
import stat
from pathlib import Path

from engine.errors import ChinwagError

APP_NAME = "Chinwag"
DIR_MODE = 0o700
FILE_MODE = 0o600


def data_dir_path() -> Path:
    """The data folder's path, without creating it."""
    home = os.environ.get("CHINWAG_HOME")
    if home:
        return Path(home).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def private_dir(path: Path, what: str = "data folder") -> Path:
    """Create path (0700) if needed and take group/other access away; ChinwagError if it cannot be."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = path.stat()
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(20, "not a folder")
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    except FileExistsError:
        raise ChinwagError(f"cannot use the {what} {path}: it is a file, not a folder") from None
    except OSError as e:
        raise ChinwagError(f"cannot use the {what} {path}: {e.strerror or e}") from e
    return path


def data_dir() -> Path:
    return private_dir(data_dir_path())


def models_dir() -> Path:
    return private_dir(data_dir() / "models", "models folder")


def kv_dir() -> Path:
    """Where evicted conversations' caches are saved."""
    return private_dir(data_dir() / "kv", "KV cache folder")


def private_file(path: Path) -> None:
    """Make an existing file readable by its owner only (0600)."""
    try:
        if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
            os.chmod(path, FILE_MODE)
    except FileNotFoundError:
        pass
