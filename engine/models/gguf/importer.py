"""GGUF → MLX model folder that `mlx_lm.load` opens.

The header reader (engine/models/gguf/header.py) is pure Python and MLX loads only inside the
functions here, so the registry can import this module to describe a GGUF cheaply.
The tokenizer is built in engine/models/gguf/tokenizer.py.
"""

import json
import math
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine import paths
from engine.errors import ModelError
from engine.models.folders import (
    BUNDLED_NAMES,
    INFO_FILE,
    STARTER_ID,
    TMP_PREFIX,
    info_for_imported,
    mlx_quantization_label,
    read_info_file,
    starter_gguf_path,
)
from engine.models.gguf import gemma3
from engine.models.gguf.checks import (
    REQUANT_BITS,
    check_importable,
    layer_names,
    needs_numpy_reader,
)
from engine.models.gguf.header import GGUFHeader, read_gguf_header

# _convert looks build_tokenizer up here at call time (a test monkeypatches it on this module).
from engine.models.gguf.tokenizer import build_tokenizer, build_tokenizer_config, check_tokenizer_metadata
from engine.types import LoadProgress, ModelInfo, ModelStatus

Progress = Callable[[LoadProgress], None] | None


def quantization_label(type_counts: dict[str, int]) -> str:
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
    path: str | Path | Sequence[Path],
    progress: Progress = None,
    dest_root: Path | None = None,
    model_id: str | None = None,
) -> ModelInfo:
    """Convert a llama or Gemma 3 GGUF to an MLX folder under models_dir(); returns its ModelInfo.

    path: a GGUF file, or the consecutive pieces of one (a list or tuple: a package's chunks).
    model_id: the folder's name (the registry passes a bundled model's); by default from the file name.

    Idempotent: a folder already imported from the same file (path, size, mtime) is reused.
    Atomic: the folder appears complete or not at all.
    """
    parts = () if isinstance(path, (str, Path)) else tuple(_clean_path(p) for p in path)
    src = parts[0] if parts else _clean_path(path)  # type: ignore[arg-type]
    report = _reporter(progress)
    report("Reading GGUF", 0)
    header = read_gguf_header(parts or src)
    check_importable(header)
    stamp = _stamp(header)
    root = Path(dest_root) if dest_root is not None else paths.models_dir()
    root.mkdir(parents=True, exist_ok=True)
    dest, existing = _destination(root, src, header, model_id)
    if existing is not None and _same_source(existing, src, stamp):
        info = info_from_folder(dest)
        if info.status == ModelStatus.READY:
            report("Imported", 5)
            return info

    _remove_stale_temps(root)
    tmp = root / f"{TMP_PREFIX}{dest.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _convert(parts or src, stamp, tmp, report)
        _install(tmp, dest)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):  # disk full, a read-only models folder: the user's to fix
            raise ModelError(f"cannot import {src.name}: {e.strerror or e}: {root}") from e
        raise  # a ChinwagError says what is wrong; anything else is a bug for the log
    report("Imported", 5)
    return info_from_folder(dest)


def _clean_path(path: str | Path) -> Path:
    src = Path(path).expanduser()
    if "\0" in str(src):
        raise ModelError(f"not a file name (it holds a NUL byte): {str(src)!r}")
    try:
        return src.resolve()
    except OSError:
        return src


def _stamp(header: GGUFHeader) -> tuple[int, int]:
    """(size, newest mtime) of the GGUF's file or pieces: what says the source changed."""
    stats = [p.stat() for p in header.files]
    return sum(st.st_size for st in stats), max(st.st_mtime_ns for st in stats)


def _remove_stale_temps(root: Path, max_age_s: float = 86400) -> None:
    """Temp folders a crash left behind (a day old, so never a running import's)."""
    for p in root.glob(f"{TMP_PREFIX}*"):
        try:
            if time.time() - p.stat().st_mtime > max_age_s:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            pass


def _eval_with_progress(weights: dict[str, Any], report: Callable[[float], None], steps: int = 20) -> None:
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


def _destination(
    root: Path, src: Path, header: GGUFHeader, model_id: str | None = None
) -> tuple[Path, dict[str, Any] | None]:
    """Folder for this GGUF: same-source folder if any, else a free slug. Returns (dest, record)."""
    starter = starter_gguf_path()
    if model_id is None and starter is not None and _same_file(src, starter):
        model_id = STARTER_ID  # the starter's own file, imported by its path
    base = model_id or slugify(src.stem)
    if base in BUNDLED_NAMES and model_id is None:
        base = f"{base}-gguf"  # a bundled model's id is reserved for it
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


def _same_source(record: dict[str, Any], src: Path, stamp: tuple[int, int]) -> bool:
    return (
        record.get("source_path") == str(src)
        and record.get("source_size") == stamp[0]
        and record.get("source_mtime_ns") == stamp[1]
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


def _convert(
    source: Path | tuple[Path, ...], stamp: tuple[int, int], out: Path, report: Callable[[str, float], None]
) -> None:
    import mlx.core as mx

    report("Reading GGUF", 1)
    header = read_gguf_header(source, keep_arrays=True)
    src = header.path
    try:
        check_tokenizer_metadata(header.metadata)
    except ModelError as e:
        raise ModelError(f"cannot import {src.name}: {e}: {src}") from e
    # The tokenizer first: its Python lists (a 262K vocabulary's merges) are gone before the weights come.
    report("Building tokenizer", 1.5)
    try:
        build_tokenizer(header.metadata).save(str(out / "tokenizer.json"))
    except ModelError as e:
        raise ModelError(f"cannot import {src.name}: {e}: {src}") from e

    readable = src
    report("Converting weights", 2)
    if needs_numpy_reader(header):
        weights = read_weights(header, lambda fraction: report("Converting weights", 2 + 0.5 * fraction))
    else:
        readable = _writable_copy(src, out)
        try:
            weights = mx.load(str(readable))  # metadata comes from our own reader
        except (RuntimeError, ValueError) as e:  # MLX's words for a GGUF it cannot parse
            raise ModelError(f"cannot read {src.name} with MLX ({e}): {src}") from e

    types = {t.name: t.type_name for t in header.tensors}
    weights, quant = convert_weights(weights, types, src, architecture=header.architecture)
    config = build_config(header, weights, quant)
    _eval_with_progress(weights, lambda fraction: report("Converting weights", 2.5 + 0.5 * fraction))

    tokenizer_config = build_tokenizer_config(header.metadata, config)
    if header.architecture == "gemma3":
        tokenizer_config.setdefault("chat_template", gemma3.CHAT_TEMPLATE)
    _write_json(out / "tokenizer_config.json", tokenizer_config)

    report("Writing model", 4)
    _write_json(out / "config.json", config)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write_json(
        out / INFO_FILE,
        {
            "source_path": str(src),
            "source_size": stamp[0],
            "source_mtime_ns": stamp[1],
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


def read_weights(header: GGUFHeader, report: Callable[[float], None] | None = None) -> dict[str, Any]:
    """A GGUF's tensors as mx.load names them, read with numpy (engine/models/gguf/blocks.py).

    Affine types become MLX quantized triples (`name.weight` packed, `.scales`, `.biases`),
    exactly; the others float arrays. One tensor is in numpy at a time.
    """
    import mlx.core as mx
    import numpy as np

    from engine.models.gguf import blocks

    data = blocks.GGUFBytes(header.files)
    total = sum(blocks.tensor_nbytes(t.type_name, math.prod(t.shape)) for t in header.tensors) or 1
    out: dict[str, Any] = {}
    done = reported = 0
    for t in header.tensors:
        nbytes = blocks.tensor_nbytes(t.type_name, math.prod(t.shape))
        offset = header.data_offset + t.offset
        shape = tuple(reversed(t.shape))  # GGUF lists the fastest dimension first
        if t.type_name in blocks.AFFINE_BITS and len(shape) == 2 and t.name.endswith(".weight"):
            base = t.name[: -len(".weight")]
            for suffix, array in zip(
                ("weight", "scales", "biases"), blocks.read_affine(data, offset, t.type_name, *shape)
            ):
                out[f"{base}.{suffix}"] = mx.array(array)
                del array
        else:
            out[t.name] = mx.array(
                np.ascontiguousarray(blocks.dense(t.type_name, data.read(offset, nbytes))).reshape(shape)
            )
        done += nbytes
        if report is not None and done * 20 // total > reported:
            reported = done * 20 // total
            report(done / total)
    return out


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


def mlx_module_name(gguf_base: str, architecture: str = "llama") -> str | None:
    """'blk.3.attn_q' → 'model.layers.3.self_attn.q_proj'; None if unknown."""
    if gguf_base in _TOP_NAMES:
        return _TOP_NAMES[gguf_base]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_base)
    names = layer_names(architecture)
    if m and m.group(2) in names:
        return f"model.layers.{m.group(1)}.{names[m.group(2)]}"
    return None


def default_float_dtype() -> Any:  # an mx.Dtype
    """float16 with Metal; float32 on CPU, where float16 math is ~40x slower and less exact."""
    import mlx.core as mx

    return mx.float16 if mx.metal.is_available() else mx.float32


def convert_weights(
    weights: dict[str, Any], types: dict[str, str], src: Path, float_dtype: Any = None, architecture: str = "llama"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rename GGUF tensors to mlx-lm names; returns (weights, per-module quantization).

    Quantized triples stay as they are (only scales/biases change dtype); float tensors of
    a K-quant type are quantized again (REQUANT_BITS); every other float tensor becomes
    float_dtype. Gemma 3's norms lose the 1 llama.cpp added (engine/models/gguf/gemma3.py).
    """
    float_dtype = float_dtype or default_float_dtype()
    out, quant = {}, {}
    for key, value in weights.items():
        base, _, suffix = key.rpartition(".")
        if base in _IGNORED:
            continue
        module = mlx_module_name(base, architecture)
        if module is None or suffix not in ("weight", "scales", "biases", "bias"):
            raise ModelError(f"cannot import {src.name}: unexpected tensor '{key}': {src}")
        if suffix == "scales":
            bits = weights[f"{base}.weight"].shape[-1] // value.shape[-1]
            quant[module] = {"group_size": 32, "bits": bits}
        tensors, requant_bits = _converted(
            key, value, f"{module}.{suffix}", types.get(key, ""), float_dtype, architecture
        )
        out.update(tensors)
        if requant_bits:
            quant[module] = {"group_size": 32, "bits": requant_bits}
    return out, quant


def _converted(
    key: str, value: Any, name: str, gguf_type: str, float_dtype: Any, architecture: str
) -> tuple[dict[str, Any], int]:
    """One GGUF tensor as the mlx-lm tensors `name` stands for, and the bits it was quantized again
    to (0 if it was not): a K-quant float weight becomes a quantized triple, any other float tensor
    float_dtype; Gemma 3's norms lose their shift."""
    import mlx.core as mx

    floating = mx.issubdtype(value.dtype, mx.floating)
    if architecture == "gemma3" and gemma3.is_norm(key) and floating:
        value = value.astype(mx.float32) - gemma3.NORM_SHIFT
    requant = name.endswith(".weight") and gguf_type in REQUANT_BITS and floating
    if requant and value.ndim == 2 and value.shape[-1] % 32 == 0:
        bits = REQUANT_BITS[gguf_type]
        wq, scales, biases = mx.quantize(value.astype(float_dtype), group_size=32, bits=bits)
        module = name.removesuffix(".weight")
        return {f"{module}.weight": wq, f"{module}.scales": scales, f"{module}.biases": biases}, bits
    if floating and value.dtype != float_dtype:
        value = value.astype(float_dtype)
    return {name: value}, 0


def build_config(header: GGUFHeader, weights: dict[str, Any], quant: dict[str, Any]) -> dict[str, Any]:
    config = _gemma3_config(header, weights) if header.architecture == "gemma3" else _llama_config(header, weights)
    if quant:
        config["quantization"] = _quant_config(quant)
    return config


def _gemma3_config(header: GGUFHeader, weights: dict[str, Any]) -> dict[str, Any]:
    meta = header.metadata
    config = gemma3.build_config(
        header,
        vocab_size=int(weights["model.embed_tokens.weight"].shape[0]),
        tied="lm_head.weight" not in weights,
        rope_scaling=_rope_scaling(header),
    )
    # The turn ends with <end_of_turn>, which the file does not name: it stops a reply as <eos> does.
    eos = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")] + [gemma3.end_of_turn_id(meta)]
    eos = list(dict.fromkeys(int(e) for e in eos if isinstance(e, int)))
    if eos:
        config["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    for kind in ("bos", "padding"):
        if isinstance(meta.get(f"tokenizer.ggml.{kind}_token_id"), int):
            config[f"{kind[:3]}_token_id"] = meta[f"tokenizer.ggml.{kind}_token_id"]
    return config


def _llama_config(header: GGUFHeader, weights: dict[str, Any]) -> dict[str, Any]:
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
    return config


def _quant_config(quant: dict[str, Any]) -> dict[str, Any]:
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


def _rope_scaling(header: GGUFHeader) -> dict[str, Any] | None:
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
