"""What makes a GGUF importable, checked from its header before anything is written:
architecture, tokenizer, tensor types, and sizes and shapes that agree with the metadata.

A hostile header (a block count of 2^32, a head count of 0, shapes that contradict the
metadata) is refused here in microseconds with one line, instead of costing gigabytes or
importing as "ready" and then failing to load. No MLX here.
"""

import math

from engine.errors import ModelError
from engine.models.gguf.header import GGUFHeader, _Skipped, printable

SUPPORTED_ARCHITECTURES = ("llama",)
# GGUF tokenizer.ggml.model values: byte-level BPE, and SentencePiece BPE (Llama 2, Mistral).
TOKENIZER_MODELS = ("gpt2", "llama")

# MLX loads these as MLX quantized triples (group size 32) or as plain arrays.
NATIVE_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0"}
# MLX dequantizes these to float16 (gguflib: not Q3_K, Q5_K, Q5_0, ...); we re-quantize
# them so that a Q4_K_M file stays about its size instead of growing 4x.
REQUANT_BITS = {"Q2_K": 4, "Q4_K": 4, "Q6_K": 6}


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
    bad = sorted(
        {t.type_name for t in header.tensors if t.type_name not in NATIVE_TYPES and t.type_name not in REQUANT_BITS}
    )
    if bad:
        raise ModelError(f"cannot import {path.name}: tensor type(s) {', '.join(bad)} are not supported: {path}")
    if "tokenizer.ggml.tokens" not in header.metadata:
        raise ModelError(f"cannot import {path.name}: it has no tokenizer (tokenizer.ggml.tokens): {path}")
    hp = hyperparameters(header)
    missing = _missing_tensors(header, hp["layers"])
    if missing:
        raise ModelError(f"cannot import {path.name}: tensor(s) {', '.join(missing[:3])} missing: {path}")
    _check_shapes(header, hp)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def hyperparameters(header: GGUFHeader) -> dict:
    """The llama sizes from the metadata, each a positive int that fits the others; ModelError if not."""
    path, arch = header.path, header.architecture

    def count(key: str, default: int | None = None, limit: int = 1 << 20) -> int:
        value = header.arch_value(key, default)
        if not _is_int(value) or not 0 < value <= limit:
            shown = f"{value!r:.40}" if not isinstance(value, _Skipped) else "an array"
            raise ModelError(
                f"cannot import {path.name}: {arch}.{key} is {shown}, not a count from 1 to {limit}: {path}"
            )
        return value

    hp = {
        "hidden": count("embedding_length"),
        "heads": count("attention.head_count"),
        "ff": count("feed_forward_length"),
    }
    hp["kv_heads"] = count("attention.head_count_kv", hp["heads"])
    # Each block needs its nine tensors: a count the file cannot hold is refused before any names are made.
    hp["layers"] = count("block_count", limit=max(1, len(header.tensors) // len(LAYER_NAMES)))
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
    ):
        value = header.arch_value(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
        ):
            raise ModelError(f"cannot import {path.name}: {arch}.{key} is {value!r:.40}, not a positive number: {path}")
    if hp["heads"] % hp["kv_heads"]:
        raise ModelError(
            f"cannot import {path.name}: head count {hp['heads']} is not a multiple "
            f"of the KV head count {hp['kv_heads']}: {path}"
        )
    return hp


def _expected_shapes(header: GGUFHeader, hp: dict) -> dict:
    """GGUF-order shapes (fastest dimension first) for every tensor the metadata implies."""
    h, ff = hp["hidden"], hp["ff"]
    q, kv = hp["heads"] * hp["head_dim"], hp["kv_heads"] * hp["head_dim"]
    per_layer = {
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
    embd: tuple = next((tuple(t.shape) for t in header.tensors if t.name == "token_embd.weight"), ())
    vocab = embd[1] if len(embd) == 2 else 0
    want = {"token_embd.weight": (h, vocab), "output_norm.weight": (h,), "output.weight": (h, vocab)}
    for i in range(hp["layers"]):
        want.update({f"blk.{i}.{part}.weight": shape for part, shape in per_layer.items()})
    return want


def _check_shapes(header: GGUFHeader, hp: dict) -> None:
    """A tensor whose shape the metadata contradicts would import as "ready" and fail to load."""
    want = _expected_shapes(header, hp)
    for t in header.tensors:
        shape = want.get(t.name)
        if shape is not None and tuple(t.shape) != shape:
            raise ModelError(
                f"cannot import {header.path.name}: tensor {printable(t.name, 60)} has shape "
                f"{list(t.shape)}, but the metadata implies {list(shape)}: {header.path}"
            )


def _missing_tensors(header: GGUFHeader, layers: int) -> list:
    names = {t.name for t in header.tensors}
    want = ["token_embd.weight", "output_norm.weight"] + [
        f"blk.{i}.{part}.weight" for i in range(layers) for part in LAYER_NAMES
    ]
    return [n for n in want if n not in names]
