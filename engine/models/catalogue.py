"""The curated model catalogue shipped in resources/catalogue.json, whether each model
fits this machine's memory, and about how fast it would write here. No Qt, no network.

Sizes are approximate (the model cards do not list them): parameters × bits per weight,
where MLX's quantization adds a 16-bit scale and bias per group of 64 weights (0.5 bits).
Speed: writing a token reads every weight once, so tokens/s ≈ memory bandwidth / the bytes
of weights as they sit in memory here (measured once per process with a numpy copy).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from importlib import resources

from engine.errors import ChinwagError
from engine.local.blas import DEQUANTIZE_ENV, DEQUANTIZE_MAX_RAM_FRACTION

GROUP_OVERHEAD_BITS = 0.5  # MLX affine quantization: bf16 scale + bias per 64 weights
RUNTIME_OVERHEAD = 1.2  # activations, KV cache of a normal chat, the runtime itself
USABLE_RAM_FRACTION = 0.75  # leave a quarter of memory to the system and other apps
BANDWIDTH_PROBE_BYTES = 64 << 20  # well past any CPU cache, and copied in a few hundredths of a second
BANDWIDTH_PROBE_COPIES = 3  # the best of these: the first also pays for page faults
CPU_SCALE_BITS = 1.0  # on the CPU the scale and bias per 64 weights are float32


@dataclass(frozen=True)
class CatalogueEntry:
    repo: str
    name: str
    family: str
    params_b: float  # billions of parameters (the original model's card)
    bits: int  # 16 = unquantized bf16
    context: int  # tokens (the original model's config)
    note: str = ""

    @property
    def quantization(self) -> str:
        return "bf16" if self.bits >= 16 else f"{self.bits}-bit"

    @property
    def approx_size_bytes(self) -> int:
        bits = self.bits + (GROUP_OVERHEAD_BITS if self.bits < 16 else 0)
        return int(self.params_b * 1e9 * bits / 8)

    @property
    def approx_memory_bytes(self) -> int:
        """About what running it takes: the weights and some room for a chat."""
        return int(self.approx_size_bytes * RUNTIME_OVERHEAD)


def load_catalogue() -> list[CatalogueEntry]:
    try:
        text = resources.files("resources").joinpath("catalogue.json").read_text(encoding="utf-8")
        data = json.loads(text)
        return [CatalogueEntry(**m) for m in data["models"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Shipped with Chinwag: a broken catalogue is a packaging bug, said in one line.
        raise ChinwagError(f"the model catalogue shipped with Chinwag cannot be read: {e}") from e


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
    model small enough to be dequantized (engine/local/blas.py)."""
    params = entry.params_b * 1e9
    if not cpu:
        return entry.approx_size_bytes
    float32 = int(params * 4)
    if entry.bits >= 16:
        return float32
    small = ram_bytes > 0 and float32 <= ram_bytes * DEQUANTIZE_MAX_RAM_FRACTION
    if small and os.environ.get(DEQUANTIZE_ENV, "") != "0":
        return float32
    return int(params * (entry.bits + CPU_SCALE_BITS) / 8)


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


def fits(entry: CatalogueEntry, ram_bytes: int) -> bool | None:
    """Whether the model should run in this much memory; None if the memory is unknown."""
    if ram_bytes <= 0:
        return None
    return entry.approx_memory_bytes <= ram_bytes * USABLE_RAM_FRACTION
