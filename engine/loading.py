"""mlx_lm.load, adapted to the device it runs on.

On the CPU backend, float16 activations take a slow path through quantized matmuls
(~40x slower here) and lose accuracy: the starter model answered nonsense. Floating
parameters (norms, quantization scales and biases) are cast to float32 there. With the
system's OpenBLAS loaded (engine/blas.py), a small quantized model runs dequantized to
float32, which prefills ~24x faster here (docs/BENCHMARKS.md, figure 6).
"""

import logging
import os
from pathlib import Path

from engine import blas
from engine.errors import ModelError

log = logging.getLogger(__name__)

CPU_FLOAT32_ENV = "CHINWAG_CPU_FLOAT32"


def use_float32() -> bool:
    import mlx.core as mx

    return mx.default_device() == mx.cpu and os.environ.get(CPU_FLOAT32_ENV, "1") != "0"


def load(path: Path):
    """(model, tokenizer) ready to run on this device; ModelError if the folder cannot load."""
    import mlx.core as mx
    import mlx_lm

    try:
        model, tokenizer = mlx_lm.load(str(path), lazy=True)
        if use_float32():
            model.set_dtype(mx.float32)
        if blas.should_dequantize(model):
            log.info("running %s dequantized to float32 on OpenBLAS", path)
            model = blas.dequantize(model)
        mx.eval(model.parameters())
    except Exception as e:  # mlx-lm raises many kinds for a bad folder; the traceback is logged
        log.warning("loading %s failed", path, exc_info=True)
        raise ModelError(f"cannot load the model in {path}: {type(e).__name__}: {e}") from e
    return model, tokenizer
