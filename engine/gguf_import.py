"""GGUF → MLX model folder that `mlx_lm.load` opens.

The header reader is pure Python (no MLX) so the registry can describe a GGUF cheaply,
and so a truncated file is refused before MLX memory-maps it.
"""

import json
import mmap
import os
import re
import shutil
import struct
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from engine import paths
from engine.errors import ChinwagError, ModelError
from engine.types import LoadProgress, ModelInfo

Progress = Optional[Callable[[LoadProgress], None]]

SUPPORTED_ARCHITECTURES = ("llama",)
# GGUF tokenizer.ggml.model values: byte-level BPE, and SentencePiece BPE (Llama 2, Mistral).
TOKENIZER_MODELS = ("gpt2", "llama")
INFO_FILE = "chinwag.json"
TMP_PREFIX = ".tmp-import-"

# GGUF tensor types: name, elements per block, bytes per block.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 30: ("BF16", 1, 2),
}
# MLX loads these as MLX quantized triples (group size 32) or as plain arrays.
NATIVE_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"}
# MLX dequantizes these to float16 (gguflib: not Q3_K, Q5_K, Q5_0, ...); we re-quantize
# them so that a Q4_K_M file stays about its size instead of growing 4x.
REQUANT_BITS = {"Q2_K": 4, "Q4_K": 4, "Q6_K": 6}

# Metadata value types: struct format (None = special).
_VALUE_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
                  7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass
class GGUFTensor:
    name: str
    shape: tuple  # GGUF order: fastest-varying dimension first
    type_id: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type {self.type_id}",))[0]


@dataclass
class GGUFHeader:
    path: Path
    version: int
    metadata: dict
    tensors: list = field(default_factory=list)
    data_offset: int = 0

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key, default=None):
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def context_length(self) -> int:
        return int(self.arch_value("context_length", 0) or 0)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    def type_counts(self) -> dict:
        """Parameter count per tensor type name, for the quantization label."""
        counts = {}
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            counts[t.type_name] = counts.get(t.type_name, 0) + n
        return counts


class _Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def unpack(self, fmt):
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError("string runs past the end of the file")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype, keep_arrays):
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, n = self.unpack("<I"), self.unpack("<Q")
            if item_type == _STRING:
                if not keep_arrays:
                    for _ in range(n):
                        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
                    if self.pos > len(self.buf):
                        raise ValueError("array runs past the end of the file")
                    return _Skipped(n)
                return [self.string() for _ in range(n)]
            fmt = _VALUE_FORMATS.get(item_type)
            if fmt is None:
                raise ValueError(f"unsupported metadata array type {item_type}")
            size = struct.calcsize(fmt)
            if self.pos + n * size > len(self.buf):
                raise ValueError("array runs past the end of the file")
            if not keep_arrays:
                self.pos += n * size
                return _Skipped(n)
            values = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos))
            self.pos += n * size
            return values
        fmt = _VALUE_FORMATS.get(vtype)
        if fmt is None:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.unpack(fmt)


@dataclass(frozen=True)
class _Skipped:
    """An array the caller did not ask for (only its length is kept)."""

    length: int


def read_gguf_header(path, keep_arrays: bool = False) -> GGUFHeader:
    """Parse a GGUF file's metadata and tensor table; ModelError if it is not a whole GGUF."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size < 24:
                raise ValueError("file is too small")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse_header(path, buf, size, keep_arrays)
    except ChinwagError:
        raise
    except FileNotFoundError:
        raise ModelError(f"GGUF file not found: {path}") from None
    except IsADirectoryError:
        raise ModelError(f"not a GGUF file (it is a folder): {path}") from None
    except (ValueError, struct.error, OverflowError, MemoryError, OSError) as e:
        raise ModelError(f"corrupt or truncated GGUF file ({e}): {path}") from None


def _parse_header(path, buf, size, keep_arrays) -> GGUFHeader:
    r = _Reader(buf)
    if bytes(buf[:4]) != b"GGUF":
        raise ValueError("no GGUF magic bytes")
    r.pos = 4
    version = r.unpack("<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ValueError("implausible header counts")
    metadata = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.unpack("<I"), keep_arrays)
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if n_dims > 8:
            raise ValueError(f"tensor {name} has {n_dims} dimensions")
        shape = tuple(r.unpack("<Q") for _ in range(n_dims))
        tensors.append(GGUFTensor(name, shape, r.unpack("<I"), r.unpack("<Q")))
    align = int(metadata.get("general.alignment", 32) or 32)
    data_offset = (r.pos + align - 1) // align * align
    for t in tensors:
        info = GGML_TYPES.get(t.type_id)
        if info is None:
            continue  # unknown size; the type check refuses it later with a clear message
        n = 1
        for d in t.shape:
            n *= d
        end = data_offset + t.offset + (n // info[1]) * info[2]
        if end > size:
            raise ValueError(f"tensor {t.name} runs past the end of the file ({size} bytes)")
    return GGUFHeader(path, version, metadata, tensors, data_offset)


def quantization_label(type_counts: dict) -> str:
    """'Q4_1' style label for a GGUF: the type holding most parameters, plus others that matter."""
    quant = {k: v for k, v in type_counts.items() if k not in ("F32",)}
    if not quant:
        return "float32"
    main = max(quant, key=quant.get)
    return main if main not in ("F16", "BF16") else main.lower().replace("f16", "float16")


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return slug or "model"


def check_importable(header: GGUFHeader) -> None:
    """Refuse, before writing anything, a GGUF this importer cannot convert."""
    path = header.path
    arch = header.architecture or "unknown"
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"cannot import {path.name}: architecture '{arch}' is not supported "
            f"(only {', '.join(SUPPORTED_ARCHITECTURES)} GGUF files can be imported): {path}"
        )
    tok_model = header.metadata.get("tokenizer.ggml.model", "")
    if tok_model not in TOKENIZER_MODELS:
        raise ModelError(
            f"cannot import {path.name}: tokenizer model '{tok_model or 'none'}' is not supported "
            f"(only {' and '.join(TOKENIZER_MODELS)}): {path}"
        )
    if int(header.metadata.get("split.count", 1) or 1) > 1:
        raise ModelError(f"cannot import {path.name}: it is one part of a split GGUF "
                         f"(merge the parts with llama-gguf-split --merge first): {path}")
    bad = sorted({t.type_name for t in header.tensors
                  if t.type_name not in NATIVE_TYPES and t.type_name not in REQUANT_BITS})
    if bad:
        raise ModelError(
            f"cannot import {path.name}: tensor type(s) {', '.join(bad)} are not supported: {path}"
        )
    missing = _missing_tensors(header)
    if missing:
        raise ModelError(f"cannot import {path.name}: tensor(s) {', '.join(missing[:3])} "
                         f"missing: {path}")


def _missing_tensors(header: GGUFHeader) -> list:
    names = {t.name for t in header.tensors}
    try:
        layers = int(header.arch_value("block_count", 0) or 0)
    except (TypeError, ValueError):
        layers = 0
    if not layers:
        return [f"{header.architecture}.block_count (metadata)"]
    want = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(layers) for part in _LAYER_NAMES
    ]
    return [n for n in want if n not in names]


# --- import -------------------------------------------------------------------------------


def import_gguf(path, progress: Progress = None, dest_root=None) -> ModelInfo:
    """Convert a llama GGUF to an MLX folder under models_dir(); returns its ModelInfo.

    Idempotent: a folder already imported from the same file (path, size, mtime) is reused.
    Atomic: the folder appears complete or not at all.
    """
    src = Path(path).expanduser()
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
    dest, existing = _destination(root, src, header)
    if existing is not None and _same_source(existing, src, st):
        info = info_from_folder(dest)
        if info.status == "ready":
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
        if isinstance(e, ChinwagError) or not isinstance(e, Exception):
            raise
        raise ModelError(f"cannot import {src.name}: {e}: {src}") from e
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


def _reporter(progress: Progress):
    def report(stage, done):
        if progress is not None:
            progress(LoadProgress(stage=stage, done=done, total=5))

    return report


def _destination(root: Path, src: Path, header: GGUFHeader):
    """Folder for this GGUF: same-source folder if any, else a free slug. Returns (dest, record)."""
    from engine.registry import STARTER_ID, starter_gguf_path

    starter = starter_gguf_path()
    base = STARTER_ID if starter is not None and _same_file(src, starter) else slugify(src.stem)
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


def _same_source(record: dict, src: Path, st) -> bool:
    return (
        record.get("source_path") == str(src)
        and record.get("source_size") == st.st_size
        and record.get("source_mtime_ns") == st.st_mtime_ns
    )


def read_info_file(folder: Path) -> Optional[dict]:
    try:
        data = json.loads((Path(folder) / INFO_FILE).read_text())
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


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


def _convert(src: Path, st, out: Path, report) -> None:
    import mlx.core as mx

    report("Reading GGUF", 1)
    header = read_gguf_header(src, keep_arrays=True)
    try:
        weights = mx.load(str(src))  # metadata comes from our own reader
    except Exception as e:
        raise ModelError(f"cannot read {src.name} with MLX ({e}): {src}") from None

    report("Converting weights", 2)
    types = {t.name: t.type_name for t in header.tensors}
    weights, quant = convert_weights(weights, types, src)
    config = build_config(header, weights, quant)

    report("Building tokenizer", 3)
    tokenizer = build_tokenizer(header.metadata)
    tokenizer.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", build_tokenizer_config(header.metadata, config))

    report("Writing model", 4)
    _write_json(out / "config.json", config)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write_json(out / INFO_FILE, {
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
    })


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))


# --- weights ------------------------------------------------------------------------------

_LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tensors that carry no weights of their own in MLX (rope_freqs becomes config.rope_scaling).
_IGNORED = {"rope_freqs"}


def mlx_module_name(gguf_base: str) -> Optional[str]:
    """'blk.3.attn_q' → 'model.layers.3.self_attn.q_proj'; None if unknown."""
    if gguf_base in _TOP_NAMES:
        return _TOP_NAMES[gguf_base]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", gguf_base)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"
    return None


def default_float_dtype():
    """float16 with Metal; float32 on CPU, where float16 math is ~40x slower and less exact."""
    import mlx.core as mx

    return mx.float16 if mx.metal.is_available() else mx.float32


def convert_weights(weights: dict, types: dict, src: Path, float_dtype=None):
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
        if suffix == "weight" and gguf_type in REQUANT_BITS and value.ndim == 2 \
                and value.shape[-1] % 32 == 0:
            bits = REQUANT_BITS[gguf_type]
            wq, scales, biases = mx.quantize(value.astype(float_dtype), group_size=32, bits=bits)
            out.update({f"{module}.weight": wq, f"{module}.scales": scales,
                        f"{module}.biases": biases})
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


def _rope_scaling(header: GGUFHeader) -> Optional[dict]:
    get = header.arch_value
    kind = get("rope.scaling.type")
    factor = get("rope.scaling.factor")
    if kind == "linear" and factor:
        return {"type": "linear", "factor": float(factor)}
    if any(t.name == "rope_freqs.weight" for t in header.tensors):
        # Llama 3.x stores its RoPE frequency factors as a tensor; these are Meta's settings.
        orig = get("rope.scaling.original_context_length", 8192) or 8192
        return {
            "rope_type": "llama3", "factor": float(factor or 8.0), "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": int(orig),
        }
    return None


def mlx_quantization_label(config: dict) -> str:
    """'4-bit', '8-bit/4-bit mixed', a dtype name, or '' (unknown) for an mlx-lm config."""
    q = config.get("quantization") or config.get("quantization_config")
    if isinstance(q, dict):
        if q.get("mode") and q.get("mode") != "affine":
            return str(q["mode"])
        bits = {q.get("bits")} | {v.get("bits") for v in q.values() if isinstance(v, dict)}
        bits = sorted((b for b in bits if isinstance(b, int)), reverse=True)
        if len(bits) == 1:
            return f"{bits[0]}-bit"
        if bits:
            return "/".join(f"{b}-bit" for b in bits) + " mixed"
        if q.get("quant_method"):
            return str(q["quant_method"])
    dtype = config.get("torch_dtype") or config.get("dtype")
    return str(dtype) if isinstance(dtype, str) else ""


# --- tokenizer ----------------------------------------------------------------------------

_GPT2 = "gpt2"
_DIGITS = "digits"
_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN_RE = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's tokenizer.ggml.pre names → the HF pre-tokenizer they stand for.
_PRE_TOKENIZERS = {
    "default": _GPT2, "gpt2": _GPT2, "gpt-2": _GPT2, "olmo": _GPT2, "jais": _GPT2,
    "smollm": _DIGITS, "starcoder": _DIGITS, "refact": _DIGITS, "command-r": _DIGITS,
    "codeshell": _DIGITS, "exaone": _DIGITS, "minerva-7b": _DIGITS,
    "llama-bpe": _LLAMA3_RE, "llama3": _LLAMA3_RE, "smaug-bpe": _LLAMA3_RE,
    "tekken": _TEKKEN_RE,
}


def _pre_tokenizer(pre: str):
    from tokenizers import Regex, pre_tokenizers

    kind = _PRE_TOKENIZERS.get(pre or "default", _GPT2)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    if kind == _GPT2:
        return byte_level
    if kind == _DIGITS:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(kind), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])


def build_tokenizer(meta: dict):
    """A `tokenizers.Tokenizer` from GGUF tokenizer metadata."""
    from tokenizers import AddedToken, Tokenizer, processors

    tokens = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    if meta.get("tokenizer.ggml.model") == "llama":
        tok = _sentencepiece_bpe(meta, tokens)
        special_types = (2, 3)  # unknown, control
    else:
        tok = _byte_level_bpe(meta, tokens)
        special_types = (3,)
    # 3 = control (special), 4 = user-defined (an added token that shows in text).
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t in special_types])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                    for i, t in enumerate(types) if t == 4])
    bos_id = meta.get("tokenizer.ggml.bos_token_id")
    add_bos = meta.get("tokenizer.ggml.add_bos_token", meta.get("tokenizer.ggml.model") == "llama")
    if add_bos and isinstance(bos_id, int):
        bos = tokens[bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    elif meta.get("tokenizer.ggml.model") != "llama":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def _vocab(tokens) -> dict:
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    return vocab


def _byte_level_bpe(meta: dict, tokens):
    from tokenizers import Tokenizer, decoders, models

    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tok = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=merges, fuse_unk=False))
    tok.pre_tokenizer = _pre_tokenizer(meta.get("tokenizer.ggml.pre", "default"))
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(meta: dict, tokens):
    """SentencePiece BPE as transformers' LlamaConverter builds it (legacy: a space after specials)."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    vocab = _vocab(tokens)
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    merges = _merges_from_scores(tokens, scores, vocab)
    unk_id = meta.get("tokenizer.ggml.unknown_token_id", 0)
    unk = tokens[unk_id] if isinstance(unk_id, int) and unk_id < len(tokens) else None
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True,
                               byte_fallback=True))
    steps = [normalizers.Replace(" ", "\u2581")]
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        steps.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0),
    ])
    return tok


def _merges_from_scores(tokens, scores, vocab) -> list:
    """BPE merges implied by a SentencePiece vocabulary: every split of a piece into two
    pieces, ordered by the merged piece's score (transformers' SentencePieceExtractor)."""
    merges = []
    for piece_id, piece in enumerate(tokens):
        local = [(piece[:i], piece[i:]) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend((scores[piece_id], piece_id, m) for m in local)
    merges.sort(key=lambda m: (-m[0], m[1]))
    return [m for _, _, m in merges]


def build_tokenizer_config(meta: dict, config: dict) -> dict:
    tokens = meta["tokenizer.ggml.tokens"]

    def token(kind):
        i = meta.get(f"tokenizer.ggml.{kind}_token_id")
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    eot = token("eot")
    result = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token("bos"),
        # The chat turn ends with EOT when a GGUF has one (Llama 3's <|eot_id|>).
        "eos_token": eot or token("eos"),
        "pad_token": token("padding") or token("eos"),
        "unk_token": token("unknown"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token",
                                       meta.get("tokenizer.ggml.model") == "llama")),
        "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        "model_max_length": config["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    template = meta.get("tokenizer.chat_template")
    if isinstance(template, str) and template:
        result["chat_template"] = template
    return result


# --- describing an imported folder --------------------------------------------------------


def info_from_folder(folder: Path) -> ModelInfo:
    """ModelInfo for a folder this module wrote (registry entry of source 'imported')."""
    from engine.registry import info_for_imported

    return info_for_imported(Path(folder))
