"""What makes a GGUF importable, checked from its header before anything is written:
architecture, tokenizer, tensor types, and sizes and shapes that agree with the metadata.

A hostile header (a block count of 2^32, a head count of 0, shapes that contradict the
metadata) is refused here in microseconds with one line, instead of costing gigabytes or
importing as "ready" and then failing to load. No MLX here.
"""

import math

from engine.errors import ModelError
from engine.models.gguf.header import GGUFHeader, _Skipped, printable

SUPPORTED_ARCHITECTURES = ("llama", "gemma3")
# GGUF tokenizer.ggml.model values: byte-level BPE, and SentencePiece BPE (Llama 2, Mistral).
TOKENIZER_MODELS = ("gpt2", "llama")

# MLX loads these as MLX quantized triples (group size 32) or as plain arrays.
NATIVE_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"}
# MLX dequantizes these to float16 (gguflib: not Q3_K, Q5_K, Q5_0, ...); we re-quantize
# them so that a Q4_K_M file stays about its size instead of growing 4x.
REQUANT_BITS = {"Q2_K": 4, "Q4_K": 4, "Q6_K": 6}
# A file holding one of these is read by the importer's numpy reader (engine/models/gguf/blocks.py),
# not by MLX's: MLX refuses a whole file for one Q5_0 tensor, and (mlx 0.32, gguflib) decodes the
# odd groups of each Q4_K block with their neighbour's scale and min. The reader keeps Q5_0 and
# Q4_K exactly, as 5- and 4-bit MLX quantization.
NUMPY_READ_TYPES = {"Q5_0", "Q4_K"}
# The bits of MLX quantization (group size 32) each GGUF type becomes.
MLX_BITS = {"Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q8_0": 8, **REQUANT_BITS}


# GGUF tensor names within a block → mlx-lm module names (the importer renames with it).
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
# Gemma 3 (mlx-lm's gemma3_text): a norm after attention and after the MLP as well, so llama.cpp's
# ffn_norm is the pre-feedforward one, and Q and K have their own norms.
GEMMA3_LAYER_NAMES = {
    **LAYER_NAMES,
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
ARCH_LAYER_NAMES = {"llama": LAYER_NAMES, "gemma3": GEMMA3_LAYER_NAMES}


def layer_names(architecture: str) -> dict[str, str]:
    """GGUF tensor names within a block -> mlx-lm module names, for an architecture."""
    return ARCH_LAYER_NAMES.get(architecture, LAYER_NAMES)


def check_importable(header: GGUFHeader) -> None:
    """Refuse, before writing anything, a GGUF this importer cannot convert."""
    path = header.path
    arch = printable(header.architecture, 60) or "unknown"
    if header.architecture not in SUPPORTED_ARCHITECTURES:
        raise ModelError(
            f"cannot import {path.name}: architecture '{arch}' is not supported "
            f"(only {', '.join(SUPPORTED_ARCHITECTURES)} GGUF files can be imported): {path}"
        )
    tok_model = header.metadata.get("tokenizer.ggml.model", "")
    if tok_model not in TOKENIZER_MODELS:
        raise ModelError(
            f"cannot import {path.name}: tokenizer model '{printable(str(tok_model), 60) or 'none'}' "
            f"is not supported (only {' and '.join(TOKENIZER_MODELS)}): {path}"
        )
    split = header.metadata.get("split.count", 1)
    if not _is_int(split) or split < 0:
        raise ModelError(f"cannot import {path.name}: split.count is not a count: {path}")
    if split > 1:
        raise ModelError(
            f"cannot import {path.name}: it is one part of a split GGUF "
            f"(merge the parts with llama-gguf-split --merge first): {path}"
        )
    bad = sorted({t.type_name for t in header.tensors if t.type_name not in NATIVE_TYPES | set(MLX_BITS)})
    if bad:
        raise ModelError(f"cannot import {path.name}: tensor type(s) {', '.join(bad)} are not supported: {path}")
    if "tokenizer.ggml.tokens" not in header.metadata:
        raise ModelError(f"cannot import {path.name}: it has no tokenizer (tokenizer.ggml.tokens): {path}")
    hp = hyperparameters(header)
    _check_numpy_types(header)
    missing = _missing_tensors(header, hp["layers"])
    if missing:
        raise ModelError(f"cannot import {path.name}: tensor(s) {', '.join(missing[:3])} missing: {path}")
    _check_shapes(header, hp)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def hyperparameters(header: GGUFHeader) -> dict[str, int]:
    """The llama sizes from the metadata, each a positive int that fits the others; ModelError if not."""
    path, arch = header.path, header.architecture

    def count(key: str, default: int | None = None, limit: int = 1 << 20) -> int:
        value = header.arch_value(key, default)
        if not _is_int(value) or not 0 < value <= limit:
            shown = f"{value!r:.40}" if not isinstance(value, _Skipped) else "an array"
            raise ModelError(
                f"cannot import {path.name}: {arch}.{key} is {shown}, not a count from 1 to {limit}: {path}"
            )
        return int(value)

    hp = {
        "hidden": count("embedding_length"),
        "heads": count("attention.head_count"),
        "ff": count("feed_forward_length"),
    }
    hp["kv_heads"] = count("attention.head_count_kv", hp["heads"])
    # Each block needs its tensors (nine for llama): a count the file cannot hold is refused before any names are made.
    hp["layers"] = count("block_count", limit=max(1, len(header.tensors) // len(layer_names(arch))))
    key_length = header.arch_value("attention.key_length")
    hp["head_dim"] = count("attention.key_length") if key_length is not None else hp["hidden"] // hp["heads"]
    if key_length is None and hp["hidden"] % hp["heads"]:
        raise ModelError(
            f"cannot import {path.name}: embedding length {hp['hidden']} is not a multiple "
            f"of the head count {hp['heads']}: {path}"
        )
    for key in (
        "attention.layer_norm_rms_epsilon",
        "rope.freq_base",
        "rope.scaling.factor",
        "rope.scaling.original_context_length",
        "rope.freq_base_swa",
    ):
        value = header.arch_value(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
        ):
            raise ModelError(f"cannot import {path.name}: {arch}.{key} is {value!r:.40}, not a positive number: {path}")
    value_length = header.arch_value("attention.value_length")
    if value_length is not None and value_length != hp["head_dim"]:
        raise ModelError(
            f"cannot import {path.name}: value length {value_length!r:.40} differs from the key length "
            f"{hp['head_dim']} (mlx-lm needs one head size): {path}"
        )
    if arch == "gemma3":
        hp["sliding_window"] = count("attention.sliding_window")
        _check_window_pattern(header, hp["layers"])
    if hp["heads"] % hp["kv_heads"]:
        raise ModelError(
            f"cannot import {path.name}: head count {hp['heads']} is not a multiple "
            f"of the KV head count {hp['kv_heads']}: {path}"
        )
    return hp


def _check_window_pattern(header: GGUFHeader, layers: int) -> None:
    """llama.cpp writes no pattern for Gemma 3 (it knows it is 6); a per-layer list is not read here."""
    pattern = header.arch_value("attention.sliding_window_pattern")
    if pattern is not None and (not _is_int(pattern) or not 0 < pattern <= layers):
        raise ModelError(
            f"cannot import {header.path.name}: {header.architecture}.attention.sliding_window_pattern "
            f"is not one period of at most {layers} layers: {header.path}"
        )


def _expected_shapes(header: GGUFHeader, hp: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """GGUF-order shapes (fastest dimension first) for every tensor the metadata implies."""
    h, ff = hp["hidden"], hp["ff"]
    q, kv = hp["heads"] * hp["head_dim"], hp["kv_heads"] * hp["head_dim"]
    per_layer: dict[str, tuple[int, ...]] = {
        "attn_q": (h, q),
        "attn_k": (h, kv),
        "attn_v": (h, kv),
        "attn_output": (q, h),
        "ffn_gate": (h, ff),
        "ffn_up": (h, ff),
        "ffn_down": (ff, h),
        "attn_norm": (h,),
        "ffn_norm": (h,),
    }
    if header.architecture == "gemma3":
        per_layer.update(
            post_attention_norm=(h,), post_ffw_norm=(h,), attn_q_norm=(hp["head_dim"],), attn_k_norm=(hp["head_dim"],)
        )
    embd: tuple[int, ...] = next((tuple(t.shape) for t in header.tensors if t.name == "token_embd.weight"), ())
    vocab = embd[1] if len(embd) == 2 else 0
    want = {"token_embd.weight": (h, vocab), "output_norm.weight": (h,), "output.weight": (h, vocab)}
    for i in range(hp["layers"]):
        want.update({f"blk.{i}.{part}.weight": shape for part, shape in per_layer.items()})
    return want


def _check_shapes(header: GGUFHeader, hp: dict[str, int]) -> None:
    """A tensor whose shape the metadata contradicts would import as "ready" and fail to load."""
    want = _expected_shapes(header, hp)
    for t in header.tensors:
        shape = want.get(t.name)
        if shape is not None and tuple(t.shape) != shape:
            raise ModelError(
                f"cannot import {header.path.name}: tensor {printable(t.name, 60)} has shape "
                f"{list(t.shape)}, but the metadata implies {list(shape)}: {header.path}"
            )


def needs_numpy_reader(header: GGUFHeader) -> bool:
    """Whether the import reads this file's tensors itself rather than with mx.load."""
    return bool(header.parts) or any(t.type_name in NUMPY_READ_TYPES for t in header.tensors)


def _check_numpy_types(header: GGUFHeader) -> None:
    from engine.models.gguf.blocks import NUMPY_TYPES

    if not needs_numpy_reader(header):
        return
    bad = sorted({t.type_name for t in header.tensors if t.type_name not in NUMPY_TYPES})
    if bad:
        path = header.path
        raise ModelError(
            f"cannot import {path.name}: tensor type(s) {', '.join(bad)} are not supported "
            f"beside {'/'.join(sorted(NUMPY_READ_TYPES))}: {path}"
        )


def _missing_tensors(header: GGUFHeader, layers: int) -> list[str]:
    names = {t.name for t in header.tensors}
    want = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(layers) for part in layer_names(header.architecture)
    ]
    return [n for n in want if n not in names]
