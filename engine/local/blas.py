"""Linux CPU: a small quantized model run dequantized to float32, where the system OpenBLAS (preloaded
by engine/cpu.py before MLX) makes float32 matmuls fast: it prefills ~24x faster here than the quantized
model (docs/BENCHMARKS.md, figure 6). Without OpenBLAS a dequantized model is slower than the quantized one.
"""

import os
from typing import Any

from engine import cpu

# The preload is engine/cpu.py's (engine/models reads whether it happened); engine/local/backend.py
# still calls it by this module's name.
from engine.cpu import preload_openblas as preload_openblas


def dequantized_bytes(model: Any) -> int:
    """The bytes the model's weights would take with every quantized layer in float32."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    total = 0
    quantized = set()
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
            quantized.add(name)
            out_dim, packed = module.weight.shape[-2:]
            in_dim = packed * 32 // module.bits
            total += out_dim * in_dim * 4
    for name, value in tree_flatten(model.parameters()):
        owner = name.rsplit(".", 1)[0]
        if owner in quantized and name.rsplit(".", 1)[-1] in ("weight", "scales", "biases"):
            continue
        total += value.size * (4 if value.dtype in (mx.float16, mx.bfloat16) else value.dtype.size)
    return total


def should_dequantize(model: Any) -> bool:
    """Dequantize on the CPU backend when OpenBLAS is loaded and the float32 model is small.

    Without OpenBLAS a dequantized model is slower than the quantized one (figure 6).
    """
    import mlx.core as mx

    choice = os.environ.get(cpu.DEQUANTIZE_ENV, "")
    if choice == "0" or mx.default_device() != mx.cpu:
        return False
    if not any(hasattr(m, "bits") for _, m in model.named_modules()):
        return False  # not quantized
    if choice == "1":
        return True
    if not cpu.openblas_loaded():
        return False
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return dequantized_bytes(model) <= ram * cpu.DEQUANTIZE_MAX_RAM_FRACTION


def dequantize(model: Any) -> Any:
    """The model with every quantized layer replaced by its float32 equivalent (in place)."""
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model

    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())
    return model
