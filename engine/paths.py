"""Where Chinwag keeps its data: platformdirs' user data dir, or $CHINWAG_HOME.

The data folder and its subfolders are private (0700): conversations, KV caches and the
log hold chat text. Files in it are created 0600 by the modules that write them.
"""

import hashlib
import os
import stat
from pathlib import Path

from engine.errors import ChinwagError

APP_NAME = "Chinwag"
DIR_MODE = 0o700
FILE_MODE = 0o600
# The data folder's own files: chinwag.db (and -wal, -shm, recovered copies), chinwag.log,
# the lock files, folders.json, servers.json, server-keys.json.
OWN_FILE_PREFIXES = ("chinwag", "window.lock", "folders.json", "servers.json", "server-keys.json")


def data_dir_path() -> Path:
    """The data folder's path, without creating it."""
    home = os.environ.get("CHINWAG_HOME")
    if home:
        try:
            return Path(home).expanduser()
        except RuntimeError:  # ~someone with no such user, or no HOME for a bare ~
            raise ChinwagError(f"CHINWAG_HOME={home!r}: no such user's home folder") from None
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME))


def private_dir(path: Path, what: str = "data folder", tighten: bool = True) -> Path:
    """Create path (0700) if needed and take group/other access away; ChinwagError if it cannot be.
    tighten=False leaves an existing folder's mode alone (a folder Chinwag did not create)."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = path.stat()
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(20, "not a folder")
        if tighten and st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    except FileExistsError as e:
        raise ChinwagError(f"cannot use the {what} {path}: {_not_a_folder(path)}") from e
    except OSError as e:
        raise ChinwagError(f"cannot use the {what} {path}: {e.strerror or e}") from e
    return path


def _not_a_folder(path: Path) -> str:
    """What is at `path` where a folder should be: a dangling symlink (whose target may be made) or a file."""
    try:
        if os.path.islink(path) and not os.path.exists(path):
            return f"it is a symlink to {os.readlink(path)}, which does not exist"
    except OSError:
        pass
    return "it is a file, not a folder"


_secured: set[Path] = set()  # data folders whose older files were made private in this process


def data_dir() -> Path:
    path = data_dir_path()
    # CHINWAG_HOME may name a folder someone shares: never change a folder we did not create
    # (one we create is made 0700; our files in it are 0600 and our subfolders 0700 all the same).
    path = private_dir(path, tighten=not os.environ.get("CHINWAG_HOME"))
    if path not in _secured:
        _secured.add(path)
        _secure_older_files(path)
    return path


def _secure_older_files(folder: Path) -> None:
    """Files an older Chinwag left group- or world-readable (0644): the data folder's own
    files and the saved KV caches become 0600, once per process."""
    try:
        # Only Chinwag's own names: CHINWAG_HOME may point at a folder that also holds other files.
        found = [p for p in folder.iterdir() if p.name.startswith(OWN_FILE_PREFIXES)]
        found += [*folder.glob("kv/*"), *folder.glob("kv/*/*.safetensors")]
    except OSError:
        return  # the next write fails with a clear message of its own
    for path in found:
        try:
            if path.is_dir() and not path.is_symlink() and path.parent.name == "kv":
                private_dir(path, "KV cache folder")
            else:
                private_file(path)
        except (OSError, ChinwagError):
            pass  # not ours to change (another owner): leave it as it is


def models_dir() -> Path:
    return private_dir(data_dir() / "models", "models folder")


def kv_dir() -> Path:
    """Where evicted conversations' caches are saved."""
    return private_dir(data_dir() / "kv", "KV cache folder")


def kv_file_name(conv_id: str) -> str:
    """A conversation's saved KV cache file, in kv/<model key>/ (the id itself never on disk)."""
    # surrogatepass: an id read from a damaged prefix index may hold a lone surrogate
    return hashlib.sha1(conv_id.encode("utf-8", "surrogatepass")).hexdigest() + ".safetensors"


def private_file(path: Path) -> None:
    """Make an existing regular file readable by its owner only (0600). A symlink or a device
    is left alone: its mode is not ours to change."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, FILE_MODE)
