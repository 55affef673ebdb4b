"""The CPU backend's choices, made before MLX is imported: the system OpenBLAS for MLX's float32
matmuls, and how a model's weights are held. engine/local acts on them (blas.py dequantizes, loading.py
casts to float32); engine/models sizes a model by them before loading it (fit.py, catalogue.py).

The mlx[cpu] wheel links the reference (netlib) BLAS it bundles. Its `cblas_sgemm` is
a plain triple loop: a 1024x1024 float32 matmul takes about 0.35 s here, against
about 0.03 s with OpenBLAS. MLX calls `cblas_sgemm` through the dynamic linker, so an
OpenBLAS loaded into the global symbol scope *before* mlx is imported provides that
symbol instead of the bundled library (docs/BENCHMARKS.md, figure 6, has the numbers).

Call `preload_openblas()` once per process before the first `import mlx` (anything that
imports mlx or mlx_lm). Importing this module is cheap and never imports mlx.

- Only on Linux; a no-op elsewhere (macOS uses Accelerate/Metal).
- `CHINWAG_NO_OPENBLAS=1` turns it off (to compare, or if a system OpenBLAS misbehaves).
- A machine without OpenBLAS keeps the bundled BLAS: Debian/Ubuntu `apt-get install
  libopenblas0-pthread`, Fedora `dnf install openblas-threads`.
- OpenBLAS reads `OPENBLAS_CORETYPE` (and `OPENBLAS_L2_SIZE`) from the environment;
  some machines set them to avoid kernels an old OpenBLAS gets wrong. They are left as
  they are and reported by `openblas_info()`.

Quantized matmuls (4-/8-bit weights) do not go through BLAS: for them OpenBLAS changes only
attention. A quantized model small enough is run dequantized to float32 (engine/local/blas.py),
which is where OpenBLAS pays off.
"""

import ctypes
import os
import sys
from typing import Any

FLOAT32_ENV = "CHINWAG_CPU_FLOAT32"  # "0": keep float16/bfloat16 on the CPU (slow and wrong there)
# Run a quantized model dequantized to float32 only if its float32 weights take at most
# this share of RAM (the starter: ~0.55 GB, about 2% of 24 GB).
DEQUANTIZE_MAX_RAM_FRACTION = 0.10
DEQUANTIZE_ENV = "CHINWAG_CPU_DEQUANTIZE"  # "1" always, "0" never, unset: automatic

DISABLE_ENV = "CHINWAG_NO_OPENBLAS"
# Debian/Ubuntu (libopenblas0-pthread / -openmp / -serial all provide the first),
# Fedora's pthread build, and an unversioned development symlink.
CANDIDATES = ("libopenblas.so.0", "libopenblasp.so.0", "libopenblas.so")

_loaded: ctypes.CDLL | None = None
_loaded_name = ""
_reason = "not tried"


def preload_openblas() -> bool:
    """Load the system OpenBLAS into the global symbol scope; True if it is loaded now.

    Must run before mlx is imported in this process. Never raises.
    """
    global _loaded, _loaded_name, _reason
    if _loaded is not None:
        return True
    if not sys.platform.startswith("linux"):
        _reason = "not Linux"
        return False
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        _reason = f"{DISABLE_ENV} is set"
        return False
    if "mlx.core" in sys.modules:
        # mlx's symbols were bound when it was loaded: a later OpenBLAS would change nothing.
        _reason = "mlx was imported before preload_openblas()"
        return False
    for name in CANDIDATES:
        try:
            _loaded = ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _loaded_name = name
        _reason = "loaded"
        return True
    _reason = "no system OpenBLAS (e.g. apt-get install libopenblas0-pthread)"
    return False


def openblas_info() -> dict[str, Any]:
    """What was loaded, for logs and benchmark reports: never raises."""
    info: dict[str, Any] = {
        "loaded": _loaded is not None,
        "reason": _reason,
        "library": _loaded_name,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE", ""),
    }
    if _loaded is None:
        return info
    for key, fn, restype in (
        ("config", "openblas_get_config", ctypes.c_char_p),
        ("core", "openblas_get_corename", ctypes.c_char_p),
        ("threads", "openblas_get_num_threads", ctypes.c_int),
    ):
        try:
            f = getattr(_loaded, fn)
            f.restype = restype
            value = f()
            info[key] = value.decode() if isinstance(value, bytes) else value
        except (AttributeError, OSError, UnicodeDecodeError):
            pass
    return info


def openblas_loaded() -> bool:
    """Whether preload_openblas() loaded OpenBLAS into this process."""
    return _loaded is not None


def openblas_expected() -> bool:
    """Whether a model loaded here runs on OpenBLAS: loaded in this process (the engine thread
    loads it before MLX), or, before MLX was imported, whether the system has one to load."""
    import ctypes.util

    if _loaded is not None:
        return True
    if "mlx.core" in sys.modules or os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return False
    return sys.platform.startswith("linux") and ctypes.util.find_library("openblas") is not None
