"""A database written by an earlier release (tests/app/core/data/schemaN.db), opened by today's Store."""

import shutil
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
