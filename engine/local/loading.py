"""mlx_lm.load, adapted to the device it runs on.

On the CPU backend, float16 activations take a slow path through quantized matmuls
(~40x slower here) and lose accuracy: the starter model answered nonsense. Floating
parameters (norms, quantization scales and biases) are cast to float32 there. With the
system's OpenBLAS loaded (engine/cpu.py, engine/local/blas.py), a small quantized model runs dequantized to
float32, which prefills ~24x faster here (docs/BENCHMARKS.md, figure 6).
"""

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import cpu
from engine.errors import ModelError
from engine.local import blas
from engine.models.fit import Form

log = logging.getLogger(__name__)


def use_float32() -> bool:
    import mlx.core as mx

    return mx.default_device() == mx.cpu and os.environ.get(cpu.FLOAT32_ENV, "1") != "0"


def load(path: Path, progress: Callable[[str, float, float], None] | None = None, form: Form | None = None) -> Any:
    """(model, tokenizer) ready to run on this device; ModelError if the folder cannot load.

    `form` (engine/models/fit.py) may ask for a leaner form than this device's usual one where that
    would not fit the memory limit: floats not cast to float32, a quantized model not dequantized.

    progress(stage, done, total) is called on this thread: the tokenizer, then the weights
    as each layer is read into memory (done/total in bytes).
    """
    import mlx.core as mx
    from mlx_lm.utils import load_model, load_tokenizer

    report = progress or (lambda stage, done, total: None)
    try:
        report("Reading the model's configuration", 0, 0)
        model, config = load_model(Path(path), lazy=True)
        report("Loading the tokenizer", 0, 0)
        tokenizer = load_tokenizer(Path(path), eos_token_ids=config.get("eos_token_id", None))
        quiet_length_warning(tokenizer)
        if use_float32() and (form is None or form.float32):
            model.set_dtype(mx.float32)
        eval_weights(model, report)
        if (form is None or form.dequantized) and blas.should_dequantize(model):
            log.info("running %s dequantized to float32 on OpenBLAS", path)
            report("Preparing the weights for this CPU", 0, 0)
            model = blas.dequantize(model)
        mx.eval(model.parameters())
    except Exception as e:  # mlx-lm raises many kinds for a bad folder; the traceback is logged
        log.warning("loading %s failed", path, exc_info=True)
        raise ModelError(f"cannot load the model in {path}: {type(e).__name__}: {e}") from e
    return model, tokenizer


def quiet_length_warning(tokenizer: Any) -> None:
    """Chinwag measures every prompt against the context and says so in one line: transformers' own
    multi-line "Token indices sequence length is longer than..." warning would print beside it."""
    hf = getattr(tokenizer, "_tokenizer", None)
    warned = getattr(hf, "deprecation_warnings", None)
    if isinstance(warned, dict):  # transformers says it once per tokenizer: as if it had already
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True


_LAYER = re.compile(r"^(.*?layers\.\d+)\.")


def eval_weights(model: Any, report: Callable[[str, float, float], None]) -> None:
    """Read the weights into memory one layer at a time, reporting the bytes done."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    groups: dict[str, list[Any]] = {}
    for name, array in tree_flatten(model.parameters()):
        match = _LAYER.match(name)
        groups.setdefault(match.group(1) if match else "", []).append(array)
    total = sum(a.nbytes for arrays in groups.values() for a in arrays) or 1
    done = 0
    report("Loading weights", 0, total)
    for arrays in groups.values():
        mx.eval(arrays)
        done += sum(a.nbytes for a in arrays)
        report("Loading weights", done, total)
