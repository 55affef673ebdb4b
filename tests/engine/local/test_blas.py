"""Linux CPU: small quantized models run dequantized to float32."""

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from engine import cpu
from engine.local import blas


def _quantized_tiny(tiny_model_path):
    import mlx_lm

    model, _ = mlx_lm.load(str(tiny_model_path))
    nn.quantize(model, group_size=32, bits=8)
    mx.eval(model.parameters())
    return model


def test_dequantized_model_computes_what_the_quantized_one_does(tiny_model_path, monkeypatch):
    model = _quantized_tiny(tiny_model_path)
    tokens = mx.array([[1, 5, 9, 42, 7]])
    before = np.array(model(tokens))
    monkeypatch.setenv(cpu.DEQUANTIZE_ENV, "1")
    assert blas.should_dequantize(model)
    monkeypatch.setenv(cpu.DEQUANTIZE_ENV, "0")
    assert not blas.should_dequantize(model)
    expected = blas.dequantized_bytes(model)
    model = blas.dequantize(model)
    assert not any(hasattr(m, "bits") for _, m in model.named_modules())
    assert expected == sum(v.nbytes for _, v in __import__("mlx.utils").utils.tree_flatten(model.parameters()))
    np.testing.assert_allclose(np.array(model(tokens)), before, rtol=1e-3, atol=1e-3)


def test_unquantized_models_are_left_alone(tiny_model, monkeypatch):
    monkeypatch.setenv(cpu.DEQUANTIZE_ENV, "1")
    assert not blas.should_dequantize(tiny_model[0])
