"""Where Chinwag keeps its data: platformdirs' user data dir, or $CHINWAG_HOME."""

import os
from pathlib import Path

APP_NAME = "Chinwag"


def data_dir() -> Path:
    home = os.environ.get("CHINWAG_HOME")
    if home:
        path = Path(home).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def kv_dir() -> Path:
    """Where evicted conversations' caches are saved."""
    path = data_dir() / "kv"
    path.mkdir(parents=True, exist_ok=True)
    return path
