"""Shared fixtures: every test gets its own data dir; the tiny model is built once."""

import os
import sys
from pathlib import Path

import pytest

# Set before Qt or huggingface_hub are imported anywhere.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# The window tests' fixtures: qloop (qasync on the pytest-qt app), engine (fake), window.
pytest_plugins = ["tests.app_helpers"]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# As the Engine does in a user's process: the system's OpenBLAS, where there is one, before anything
# imports mlx (here the test modules and the tiny model would, before any Engine could).
from engine import cpu  # noqa: E402

cpu.preload_openblas()


@pytest.fixture(autouse=True)
def chinwag_home(tmp_path, monkeypatch):
    """Redirect the data dir (and the Hugging Face cache) into a temporary folder."""
    home = tmp_path / "chinwag-home"
    home.mkdir()
    monkeypatch.setenv("CHINWAG_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return home


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_path):
    """(model, tokenizer) loaded with mlx_lm, shared by the tests that run on this thread."""
    import mlx_lm

    return mlx_lm.load(str(tiny_model_path))


@pytest.fixture
def store(chinwag_home):
    """The conversation store in this test's data dir."""
    from app.core.store import Store

    s = Store()
    yield s
    s.close()


def run_with_engine(model_path, body, **options):
    """`await body(engine)` on a fresh Engine with the model at `model_path` loaded; closed after."""
    import asyncio

    from engine import Engine

    async def main():
        engine = Engine(**options)
        try:
            await engine.load_model(str(model_path))
            return await body(engine)
        finally:
            await engine.close()

    return asyncio.run(main())


@pytest.fixture
def engine_with(tiny_model_path):
    """Run `body(engine)` on a fresh engine with the tiny model loaded."""
    return lambda body, **options: run_with_engine(tiny_model_path, body, **options)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(config, items):
    """Mark the tests of tests/slow.py `slow` (`make test-fast` leaves them out); a stale entry fails."""
    from tests.slow import SLOW

    found: dict = {}
    for item in items:
        path, _, name = item.nodeid.partition("::")
        found.setdefault(path, set()).add(name.split("[")[0])
        listed = SLOW.get(path, set())
        if "*" in listed or name.split("[")[0] in listed:
            item.add_marker(pytest.mark.slow)
    stale = sorted(f"{path}::{name}" for path, names in found.items() for name in SLOW.get(path, set()) - names - {"*"})
    if stale and not any("::" in arg for arg in config.args):  # whole files collected: an entry matches or is stale
        raise pytest.UsageError(f"tests/slow.py lists tests that are gone: {', '.join(stale)}")
