"""The curated model catalogue shipped in resources/catalogue.json, whether each model
fits this machine's memory, and about how fast it would write here. No Qt, no network.

Fit: the same Plan that refuses a model before loading it (engine/models/fit.py), sized from the
entry's parameters, bits and config figures, against the limit the engine would use.

Each entry names its mlx-lm architecture (the config's model_type); the kind of cache that
architecture keeps while it writes comes from one table here (CACHE_KINDS), so the JSON cannot
disagree with it. Sizes are the repo's files as Hugging Face lists them, or, where no listing
was found, parameters × bits per weight, where MLX's quantization adds a 16-bit scale and bias
per group of 64 weights (0.5 bits).
Speed: writing a token reads every weight it uses once (a mixture of experts only its active
share), so tokens/s ≈ memory bandwidth / the bytes of those weights as they sit in memory here
(measured once per process with a numpy copy).
"""

from __future__ import annotations

import enum
import functools
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from engine.cpu import DEQUANTIZE_ENV, DEQUANTIZE_MAX_RAM_FRACTION
from engine.errors import ChinwagError
from engine.models import fit
from engine.types import KVQuantization

GROUP_OVERHEAD_BITS = 0.5  # MLX affine quantization: bf16 scale + bias per 64 weights
BANDWIDTH_PROBE_BYTES = 64 << 20  # well past any CPU cache, and copied in a few hundredths of a second
BANDWIDTH_PROBE_COPIES = 3  # the best of these: the first also pays for page faults
CPU_SCALE_BITS = 1.0  # on the CPU the scale and bias per 64 weights are float32


class CacheKind(enum.StrEnum):
    """What a model keeps per token of the chat while it writes (its value is the picker's label)."""

    ATTENTION = "attention"  # keys and values of every token in every layer
    SLIDING_WINDOW = "sliding window"  # most layers keep only the last few hundred or thousand tokens
    RECURRENT_HYBRID = "recurrent (hybrid)"  # most layers keep a fixed-size state; a few attention layers
    LATENT_MLA = "latent (MLA)"  # one compressed latent vector per token (multi-head latent attention)

    @property
    def explanation(self) -> str:
        return _CACHE_EXPLANATIONS[self]


_CACHE_EXPLANATIONS = {
    CacheKind.ATTENTION: "keeps the keys and values of every token in every layer: memory grows with the chat",
    CacheKind.SLIDING_WINDOW: (
        "most layers keep only the last few hundred or thousand tokens; a few keep the whole chat"
    ),
    CacheKind.RECURRENT_HYBRID: (
        "most layers carry a fixed-size state (Mamba, linear attention or short convolutions); "
        "a few attention layers keep the whole chat"
    ),
    CacheKind.LATENT_MLA: (
        "keeps one compressed latent vector per token (multi-head latent attention): "
        "several times smaller than plain attention"
    ),
}

# The mlx-lm architecture (config.json's model_type) -> the cache its model makes (make_cache in
# mlx_lm/models/<module>.py, mlx-lm 0.32). The multimodal wrappers run the text model they name.
CACHE_KINDS: dict[str, CacheKind] = {
    "llama": CacheKind.ATTENTION,
    "mistral": CacheKind.ATTENTION,  # mlx-lm runs it as llama
    "mistral3": CacheKind.ATTENTION,  # Ministral 3: ministral3 text model, no sliding layers
    "qwen3": CacheKind.ATTENTION,
    "smollm3": CacheKind.ATTENTION,  # llama with some layers without RoPE
    "gemma3_text": CacheKind.SLIDING_WINDOW,  # 5 of every 6 layers keep a window of recent tokens
    "gemma3": CacheKind.SLIDING_WINDOW,  # gemma3_text with a vision tower
    "gemma4": CacheKind.SLIDING_WINDOW,  # gemma4_text (most layers windowed) with vision and audio towers
    "gpt_oss": CacheKind.SLIDING_WINDOW,  # every other layer keeps the last 128 tokens
    "qwen3_5": CacheKind.RECURRENT_HYBRID,  # gated delta net, attention every fourth layer
    "lfm2": CacheKind.RECURRENT_HYBRID,  # short convolutions and some attention layers
    "granitemoehybrid": CacheKind.RECURRENT_HYBRID,  # Mamba-2 with some attention layers
    "glm4_moe_lite": CacheKind.LATENT_MLA,
}


def estimated_size_bytes(params_b: float, bits: int) -> int:
    """The bytes of weights with this many parameters at this quantization (bf16 unquantized)."""
    return round(params_b * 1e9 * (bits + (GROUP_OVERHEAD_BITS if bits < 16 else 0)) / 8)


@dataclass(frozen=True)
class CatalogueEntry:
    repo: str
    name: str
    family: str
    model_type: str  # the mlx-lm architecture (config.json's model_type)
    params_b: float  # billions of parameters (the original model's card)
    bits: int  # 16 = unquantized bf16
    context: int  # tokens (the original model's card)
    size_bytes: int  # the repo's files as Hugging Face lists them
    size_estimated: bool = False  # no listing found: size_bytes is estimated_size_bytes()
    active_params_b: float | None = None  # read per token, if fewer (mixture of experts)
    quantization: str = ""  # a label other than "4-bit" (gpt-oss: MXFP4)
    note: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # config.json's cache figures (fit.figures_config)

    def __post_init__(self) -> None:
        if not self.quantization:
            object.__setattr__(self, "quantization", "bf16" if self.bits >= 16 else f"{self.bits}-bit")

    @property
    def cache_kind(self) -> CacheKind:
        return CACHE_KINDS[self.model_type]

    @property
    def read_params_b(self) -> float:
        """The billions of parameters one token reads."""
        return self.active_params_b or self.params_b

    @property
    def approx_size_bytes(self) -> int:
        return self.size_bytes

    def plan(self, limit: int | None, kv: KVQuantization | None) -> fit.Plan:
        """What it would need here against `limit` (None: the engine's default), by the Plan that
        refuses a model before loading it."""
        others = "sliding_attention" if self.cache_kind == CacheKind.SLIDING_WINDOW else "linear_attention"
        config = fit.figures_config(self.config, others)
        return fit.estimated_plan(self.name, round(self.params_b * 1e9), self.bits, config, limit, kv)


def load_catalogue() -> list[CatalogueEntry]:
    try:
        text = resources.files("resources").joinpath("catalogue.json").read_text(encoding="utf-8")
        data = json.loads(text)
        entries = [CatalogueEntry(**m) for m in data["models"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Shipped with Chinwag: a broken catalogue is a packaging bug, said in one line.
        raise ChinwagError(f"the model catalogue shipped with Chinwag cannot be read: {e}") from e
    unknown = sorted({e.model_type for e in entries} - CACHE_KINDS.keys())
    if unknown:
        raise ChinwagError(f"the model catalogue shipped with Chinwag names unknown architectures: {unknown}")
    unsized = [e.repo for e in entries if not e.config.get("num_hidden_layers")]
    if unsized:  # fit would count no cache for them
        raise ChinwagError(f"the model catalogue shipped with Chinwag gives no cache figures for {unsized}")
    return entries


def machine_ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0  # unknown


def runs_on_cpu() -> bool:
    """MLX runs on the GPU (Metal) only on Apple silicon; everywhere else on the CPU backend."""
    return not (sys.platform == "darwin" and platform.machine() == "arm64")


def bytes_per_token(entry: CatalogueEntry, ram_bytes: int, cpu: bool = True) -> int:
    """The bytes of weights read to write one token, as Chinwag would run the model here
    (engine/local/loading.py): on the CPU, bf16 weights become float32, and so does a quantized
    model small enough to be dequantized (engine/cpu.py). A mixture of experts reads only
    its active parameters."""
    read = entry.read_params_b * 1e9
    if not cpu:
        return estimated_size_bytes(entry.read_params_b, entry.bits)
    if entry.bits >= 16:
        return int(read * 4)
    small = ram_bytes > 0 and entry.params_b * 1e9 * 4 <= ram_bytes * DEQUANTIZE_MAX_RAM_FRACTION
    if small and os.environ.get(DEQUANTIZE_ENV, "") != "0":
        return int(read * 4)
    return int(read * (entry.bits + CPU_SCALE_BITS) / 8)


def tokens_per_second(entry: CatalogueEntry, bandwidth: float, ram_bytes: int, cpu: bool = True) -> float:
    """About how many tokens a second the model writes here (an upper bound: compute is not counted)."""
    return bandwidth / bytes_per_token(entry, ram_bytes, cpu) if bandwidth > 0 else 0.0


@functools.cache
def memory_bandwidth() -> float:
    """Bytes a second this machine moves between memory and the CPU: the best of a few copies
    of an array larger than its caches (each copy reads and writes every byte). Once per process."""
    import numpy as np

    src = np.ones(BANDWIDTH_PROBE_BYTES // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(BANDWIDTH_PROBE_COPIES):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - start)
    return 2 * src.nbytes / best if best > 0 else 0.0


def speed_text(tps: float) -> str:
    """'about 3 tokens/s here', or under one: 'under 1 token/s here'."""
    if tps <= 0:
        return ""
    if tps < 1:
        return "under 1 token/s here"
    if tps >= 100:
        return "over 100 tokens/s here"
    n = round(tps)
    return f"about {n} token{'s' if n != 1 else ''}/s here"
