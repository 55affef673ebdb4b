"""What kv/ holds of a deleted chat, erased under every model: its saved cache, the temp file of a
save that was cut off (the whole cache under another name), and its entry in each model's prefix
index (its ids' hashes). A cache is saved under the model loaded at the time, so a chat deleted
after a switch has files under another model's key. No MLX: a chat deleted before the engine has
started is erased too. Never raises: what cannot be removed (a folder in its place) is logged.
"""

import logging
import os
import stat
from pathlib import Path

from engine.atomic import TEMP_SUFFIX
from engine.context import prefixes
from engine.paths import data_dir_path, kv_file_name

log = logging.getLogger(__name__)


def erase_saved(conv_id: str, folder: Path | None = None) -> None:
    """Delete everything kv/ (`folder`) holds of `conv_id`, under every model's key."""
    folder = Path(folder) if folder is not None else data_dir_path() / "kv"
    name = kv_file_name(conv_id)
    try:
        models = [p for p in folder.iterdir() if p.is_dir()]
    except OSError:  # no kv/ yet (or not a folder): nothing saved there
        return
    for model in models:
        try:
            cut_off = list(model.glob(f".{name[:40]}.*{TEMP_SUFFIX}.safetensors"))  # atomic.replacing's temp name
        except OSError:
            cut_off = []
        for path in [model / name, *cut_off]:
            remove(path)
        prefixes.drop(model / prefixes.FILE_NAME, conv_id)


def remove(path: Path) -> None:
    """Delete a file (or a link, a pipe) at `path`; a folder there, or a failure, is logged and left."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            log.warning("cannot remove %s: it is a folder, not a saved cache", path)
            return
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as e:
        log.warning("cannot remove %s: %s", path, e.strerror or e)
