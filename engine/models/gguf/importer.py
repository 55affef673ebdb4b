"""GGUF → MLX model folder that `mlx_lm.load` opens.

The header reader (engine/models/gguf/header.py) is pure Python and MLX loads only inside the
functions here, so the registry can import this module to describe a GGUF cheaply.
The tokenizer is built in engine/models/gguf/tokenizer.py.
"""

import json
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import paths
from engine.errors import ModelError
from engine.models.folders import (
    INFO_FILE,
    STARTER_ID,
    TMP_PREFIX,
    info_for_imported,
    mlx_quantization_label,
    read_info_file,
    starter_gguf_path,
)
from engine.models.gguf.checks import (
    LAYER_NAMES,
    REQUANT_BITS,
    check_importable,
)
from engine.models.gguf.header import GGUFHeader, read_gguf_header

# _convert looks build_tokenizer up here at call time (a test monkeypatches it on this module).
from engine.models.gguf.tokenizer import build_tokenizer, build_tokenizer_config, check_tokenizer_metadata
from engine.types import LoadProgress, ModelInfo, ModelStatus

Progress = Callable[[LoadProgress], None] | None


def quantization_label(type_counts: dict) -> str:
    """'Q4_1' style label for a GGUF: the type holding most parameters, plus others that matter."""
    quant = {k: v for k, v in type_counts.items() if k not in ("F32",)}
    if not quant:
        return "float32"
    main = max(quant, key=quant.__getitem__)
    return main if main not in ("F16", "BF16") else main.lower().replace("f16", "float16")


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return slug or "model"


# --- import -------------------------------------------------------------------------------


def import_gguf(
    path: str | Path, progress: Progress = None, dest_root: Path | None = None, model_id: str | None = None
) -> ModelInfo:
    """Convert a llama GGUF to an MLX folder under models_dir(); returns its ModelInfo.

    model_id: the folder's name (the registry passes the starter's); by default from the file name.

    Idempotent: a folder already imported from the same file (path, size, mtime) is reused.
    Atomic: the folder appears complete or not at all.
    """
    src = Path(path).expanduser()
    if "\0" in str(src):
        raise ModelError(f"not a file name (it holds a NUL byte): {str(src)!r}")
    try:
        src = src.resolve()
    except OSError:
        pass
    report = _reporter(progress)
    report("Reading GGUF", 0)
    header = read_gguf_header(src)
    check_importable(header)
    st = src.stat()
    root = Path(dest_root) if dest_root is not None else paths.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    dest, existing = _destination(root, src, header, model_id)
    if existing is not None and _same_source(existing, src, st):
        info = info_from_folder(dest)
        if info.status == ModelStatus.READY:
            report("Imported", 5)
            return info

    _remove_stale_temps(root)
    tmp = root / f"{TMP_PREFIX}{dest.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _convert(src, st, tmp, report)
        _install(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):  # disk full, a read-only models folder: the user's to fix
            raise ModelError(f"cannot import {src.name}: {e.strerror or e}: {root}") from e
        raise  # a ChinwagError says what is wrong; anything else is a bug for the log
    report("Imported", 5)
    return info_from_folder(dest)


def _remove_stale_temps(root: Path, max_age_s: float = 86400) -> None:
    """Temp folders a crash left behind (a day old, so never a running import's)."""
    for p in root.glob(f"{TMP_PREFIX}*"):
        try:
            if time.time() - p.stat().st_mtime > max_age_s:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _eval_with_progress(weights: dict, report: Callable[[float], None], steps: int = 20) -> None:
    """Compute the converted tensors (the import's long step) reporting the fraction done."""
    import mlx.core as mx

    arrays = list(weights.values())
    total = sum(a.nbytes for a in arrays) or 1
    done = reported = 0
    for array in arrays:
        mx.eval(array)
        done += array.nbytes
        if done * steps // total > reported:  # about `steps` reports, not one per tensor
            reported = done * steps // total
            report(done / total)


def _reporter(progress: Progress) -> Callable[[str, float], None]:
    def report(stage: str, done: float) -> None:
        if progress is not None:
            progress(LoadProgress(stage=stage, done=done, total=5))

    return report


def _destination(root: Path, src: Path, header: GGUFHeader, model_id: str | None = None) -> tuple[Path, dict | None]:
    """Folder for this GGUF: same-source folder if any, else a free slug. Returns (dest, record)."""
    starter = starter_gguf_path()
    if model_id is None and starter is not None and _same_file(src, starter):
        model_id = STARTER_ID  # the starter's own file, imported by its path
    base = model_id or slugify(src.stem)
    if base == STARTER_ID and model_id is None:
        base = f"{STARTER_ID}-gguf"  # the starter's id is reserved for the starter
    for i in range(1, 1000):
        dest = root / (base if i == 1 else f"{base}-{i}")
        record = read_info_file(dest)
        if not dest.exists():
            return dest, None
        if record is not None and record.get("source_path") == str(src):
            return dest, record
    raise ModelError(f"too many imported models named {base} in {root}")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _same_source(record: dict, src: Path, st: os.stat_result) -> bool:
    return (
        record.get("source_path") == str(src)
        and record.get("source_size") == st.st_size
        and record.get("source_mtime_ns") == st.st_mtime_ns
    )


def _install(tmp: Path, dest: Path) -> None:
    """Move the finished temp folder into place, replacing an out-of-date import of the same file."""
    old = None
    if dest.exists():
        old = dest.with_name(f"{TMP_PREFIX}old-{dest.name}-{uuid.uuid4().hex[:8]}")
        os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        if old is not None:
            os.rename(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _convert(src: Path, st: os.stat_result, out: Path, report: Callable[[str, float], None]) -> None:
    import mlx.core as mx

    report("Reading GGUF", 1)
    header = read_gguf_header(src, keep_arrays=True)
    try:
        check_tokenizer_metadata(header.metadata)
    except ModelError as e:
        raise ModelError(f"cannot import {src.name}: {e}: {src}") from e
    readable = _writable_copy(src, out)
    try:
        weights = mx.load(str(readable))  # metadata comes from our own reader
    except (RuntimeError, ValueError) as e:  # MLX's words for a GGUF it cannot parse
        raise ModelError(f"cannot read {src.name} with MLX ({e}): {src}") from e

    report("Converting weights", 2)
    types = {t.name: t.type_name for t in header.tensors}
    weights, quant = convert_weights(weights, types, src)
    config = build_config(header, weights, quant)
    _eval_with_progress(weights, lambda fraction: report("Converting weights", 2 + fraction))

    report("Building tokenizer", 3)
    try:
        tokenizer = build_tokenizer(header.metadata)
    except ModelError as e:
        raise ModelError(f"cannot import {src.name}: {e}: {src}") from e
    tokenizer.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", build_tokenizer_config(header.metadata, config))

    report("Writing model", 4)
    _write_json(out / "config.json", config)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write_json(
        out / INFO_FILE,
        {
            "source_path": str(src),
            "source_size": st.st_size,
            "source_mtime_ns": st.st_mtime_ns,
            "architecture": header.architecture,
            "quantization": quantization_label(header.type_counts()),
            "mlx_quantization": mlx_quantization_label(config),
            "dtype": str(weights["model.norm.weight"].dtype).split(".")[-1],
            "name": header.name,
            "context_length": header.context_length,
            "imported_at": time.time(),
        },
    )
    if readable != src:
        readable.unlink()


def _writable_copy(src: Path, out: Path) -> Path:
    """src, or a copy of it in out when we may not write it: mx.load opens a GGUF read-write,
    so a 0444 file, a read-only mount or a read-only install of the starter fails there."""
    mode = src.stat().st_mode
    if os.access(src, os.W_OK) and mode & stat.S_IWUSR:
        return src
    copy = out / ".source.gguf"
    shutil.copyfile(src, copy)
    os.chmod(copy, 0o600)
    return copy


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))


# --- weights ------------------------------------------------------------------------------

_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tensors that carry no weights of their own in MLX (rope_freqs becomes config.rope_scaling).
_IGNORED = {"rope_freqs"}


def mlx_module_name(gguf_base: str) -> str | None:
    """'blk.3.attn_q' → 'model.layers.3.self_attn.q_proj'; None if unknown."""
    if gguf_base in _TOP_NAMES:
        return _TOP_NAMES[gguf_base]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_base)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{LAYER_NAMES[m.group(2)]}"
    return None


def default_float_dtype() -> Any:  # an mx.Dtype
    """float16 with Metal; float32 on CPU, where float16 math is ~40x slower and less exact."""
    import mlx.core as mx

    return mx.float16 if mx.metal.is_available() else mx.float32


def convert_weights(weights: dict, types: dict, src: Path, float_dtype: Any = None) -> tuple[dict, dict]:
    """Rename GGUF tensors to mlx-lm llama names; returns (weights, per-module quantization).

    Quantized triples stay as they are (only scales/biases change dtype); every float
    tensor becomes float_dtype.
    """
    import mlx.core as mx

    float_dtype = float_dtype or default_float_dtype()
    out, quant = {}, {}
    for key, value in weights.items():
        base, _, suffix = key.rpartition(".")
        if base in _IGNORED:
            continue
        module = mlx_module_name(base)
        if module is None or suffix not in ("weight", "scales", "biases", "bias"):
            raise ModelError(f"cannot import {src.name}: unexpected tensor '{key}': {src}")
        if suffix == "scales":
            bits = weights[f"{base}.weight"].shape[-1] // value.shape[-1]
            quant[module] = {"group_size": 32, "bits": bits}
        gguf_type = types.get(key, "")
        if suffix == "weight" and gguf_type in REQUANT_BITS and value.ndim == 2 and value.shape[-1] % 32 == 0:
            bits = REQUANT_BITS[gguf_type]
            wq, scales, biases = mx.quantize(value.astype(float_dtype), group_size=32, bits=bits)
            out.update({f"{module}.weight": wq, f"{module}.scales": scales, f"{module}.biases": biases})
            quant[module] = {"group_size": 32, "bits": bits}
            continue
        if mx.issubdtype(value.dtype, mx.floating) and value.dtype != float_dtype:
            value = value.astype(float_dtype)
        out[f"{module}.{suffix}"] = value
    return out, quant


def build_config(header: GGUFHeader, weights: dict, quant: dict) -> dict:
    meta = header.metadata
    arch = header.architecture
    get = header.arch_value
    hidden = int(get("embedding_length"))
    heads = int(get("attention.head_count"))
    kv_heads = get("attention.head_count_kv", heads)
    if isinstance(kv_heads, list):
        raise ModelError(f"cannot import {header.path.name}: per-layer KV head counts: {header.path}")
    config = {
        "model_type": arch,
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        # The embedding's rows, not llama.vocab_size: they must match for mlx-lm.
        "vocab_size": int(weights["model.embed_tokens.weight"].shape[0]),
        "max_position_embeddings": header.context_length or 4096,
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        # GGUF stores Q/K rows permuted for interleaved ("traditional") RoPE.
        "rope_traditional": True,
        "tie_word_embeddings": "lm_head.weight" not in weights,
        "attention_bias": any(k.endswith("self_attn.q_proj.bias") for k in weights),
        "mlp_bias": any(k.endswith("mlp.up_proj.bias") for k in weights),
    }
    key_length = get("attention.key_length")
    if key_length and int(key_length) != hidden // heads:
        config["head_dim"] = int(key_length)
    rope_scaling = _rope_scaling(header)
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    eos = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
    eos = list(dict.fromkeys(int(e) for e in eos if isinstance(e, int)))
    if eos:
        config["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    if isinstance(meta.get("tokenizer.ggml.bos_token_id"), int):
        config["bos_token_id"] = meta["tokenizer.ggml.bos_token_id"]
    if quant:
        config["quantization"] = _quant_config(quant)
    return config


def _quant_config(quant: dict) -> dict:
    """Top-level default = the most common setting; every module also named explicitly.

    mlx_lm.load's class_predicate returns config["quantization"][path] when the path is
    listed, so the 8-bit embedding and 4-bit layers each get their own bits.
    """
    settings = [(q["group_size"], q["bits"]) for q in quant.values()]
    group, bits = max(set(settings), key=settings.count)
    config = {"group_size": group, "bits": bits}
    for module, q in sorted(quant.items()):
        config[module] = dict(q)
    return config


def _rope_scaling(header: GGUFHeader) -> dict | None:
    get = header.arch_value
    kind = get("rope.scaling.type")
    factor = get("rope.scaling.factor")
    if kind == "linear" and factor:
        return {"type": "linear", "factor": float(factor)}
    if any(t.name == "rope_freqs.weight" for t in header.tensors):
        # Llama 3.x stores its RoPE frequency factors as a tensor; these are Meta's settings.
        orig = get("rope.scaling.original_context_length", 8192) or 8192
        return {
            "rope_type": "llama3",
            "factor": float(factor or 8.0),
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": int(orig),
        }
    return None


# --- describing an imported folder --------------------------------------------------------


def info_from_folder(folder: Path) -> ModelInfo:
    """ModelInfo for a folder this module wrote (registry entry of source 'imported')."""
    return info_for_imported(Path(folder))
