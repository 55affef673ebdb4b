"""The curated model catalogue shipped in resources/catalogue.json, and whether each model
fits this machine's memory. No Qt, no network.

Sizes are approximate (the model cards do not list them): parameters × bits per weight,
where MLX's quantization adds a 16-bit scale and bias per group of 64 weights (0.5 bits).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources

from engine.errors import ChinwagError

GROUP_OVERHEAD_BITS = 0.5  # MLX affine quantization: bf16 scale + bias per 64 weights
RUNTIME_OVERHEAD = 1.2  # activations, KV cache of a normal chat, the runtime itself
USABLE_RAM_FRACTION = 0.75  # leave a quarter of memory to the system and other apps


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


def fits(entry: CatalogueEntry, ram_bytes: int) -> bool | None:
    """Whether the model should run in this much memory; None if the memory is unknown."""
    if ram_bytes <= 0:
        return None
    return entry.approx_memory_bytes <= ram_bytes * USABLE_RAM_FRACTION
