"""A database written by an earlier release (tests/app/core/data/schemaN.db), opened by today's Store."""

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from app.core.store import Store

DATA = Path(__file__).parent / "data"


def store_from(fixture: Path, home: Path) -> Iterator[Store]:
    """The fixture copied in as the data folder's database (the copy is migrated, not the fixture)."""
    shutil.copyfile(fixture, home / "chinwag.db")
    (home / "chinwag.db").chmod(0o600)
    s = Store()
    yield s
    s.close()


def raw_copy(fixture: Path, folder: Path) -> sqlite3.Connection:
    """A plain SQLite connection to a copy of the fixture in `folder` (the fixture itself stays as it is)."""
    shutil.copyfile(fixture, folder / "old.db")
    return sqlite3.connect(folder / "old.db")
