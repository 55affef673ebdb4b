"""Linux CPU speed-ups: the system OpenBLAS preloaded before mlx, small models dequantized."""

import os
import subprocess
import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from engine.local import blas


def _probe(code: str, **env) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


PROBE = (
    "from engine.local import blas; ok = blas.preload_openblas(); import mlx.core as mx; "
    "a = mx.random.normal((64, 64)); err = mx.abs(a @ mx.eye(64) - a).max().item(); "
    "print(ok, blas.openblas_info()['reason'], err < 1e-5)"
)


def test_preload_is_refused_after_mlx_and_when_disabled():
    assert (
        _probe(
            "import mlx.core; from engine.local import blas; print(blas.preload_openblas(), blas.openblas_info()['reason'])"
        )
        == "False mlx was imported before preload_openblas()"
    )
    assert _probe(PROBE, CHINWAG_NO_OPENBLAS="1") == "False CHINWAG_NO_OPENBLAS is set True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is for Linux")
def test_preload_loads_openblas_when_the_system_has_it():
    import ctypes.util

    out = _probe(PROBE)
    if ctypes.util.find_library("openblas") is None:
        assert out.startswith("False no system OpenBLAS")
    else:
        assert out == "True loaded True"  # and matmuls still compute the right thing


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
    monkeypatch.setenv(blas.DEQUANTIZE_ENV, "1")
    assert blas.should_dequantize(model)
    monkeypatch.setenv(blas.DEQUANTIZE_ENV, "0")
    assert not blas.should_dequantize(model)
    expected = blas.dequantized_bytes(model)
    model = blas.dequantize(model)
    assert not any(hasattr(m, "bits") for _, m in model.named_modules())
    assert expected == sum(v.nbytes for _, v in __import__("mlx.utils").utils.tree_flatten(model.parameters()))
    np.testing.assert_allclose(np.array(model(tokens)), before, rtol=1e-3, atol=1e-3)


def test_unquantized_models_are_left_alone(tiny_model, monkeypatch):
    monkeypatch.setenv(blas.DEQUANTIZE_ENV, "1")
    assert not blas.should_dequantize(tiny_model[0])
