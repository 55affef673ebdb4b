"""Linux CPU: the system OpenBLAS preloaded before mlx."""

import os
import subprocess
import sys

import pytest


def _probe(code: str, **env) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, **env}
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


PROBE = (
    "from engine import cpu; ok = cpu.preload_openblas(); import mlx.core as mx; "
    "a = mx.random.normal((64, 64)); err = mx.abs(a @ mx.eye(64) - a).max().item(); "
    "print(ok, cpu.openblas_info()['reason'], err < 1e-5)"
)


def test_preload_is_refused_after_mlx_and_when_disabled():
    assert (
        _probe("import mlx.core; from engine import cpu; print(cpu.preload_openblas(), cpu.openblas_info()['reason'])")
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
