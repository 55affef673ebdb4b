"""mlx-lm's import (mlx_lm/utils.py) calls `setrlimit(RLIMIT_NOFILE, (2048, 4096))`: under a hard limit below
4,096 (`ulimit -n 1024`, a service's LimitNOFILE=1024) that raises and no model can load, and above it the
call lowers the process's limits. `keep_descriptor_limits()` (run when `engine` is imported, before any
mlx-lm import) makes that one import ask only for what the limits allow: the soft limit raised towards
mlx-lm's 2,048 within the hard limit, neither ever lowered.
"""

import importlib.abc
import importlib.machinery
import resource
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

_MODULE = "mlx_lm.utils"


def allowed(wanted: tuple[int, int], current: tuple[int, int]) -> tuple[int, int]:
    """The (soft, hard) descriptor limits to set when `wanted` is asked for under `current`."""
    soft, hard = current
    want_soft = wanted[0]
    if hard != resource.RLIM_INFINITY:
        want_soft = min(want_soft, hard)
    if soft == resource.RLIM_INFINITY or (want_soft != resource.RLIM_INFINITY and want_soft < soft):
        want_soft = soft
    return want_soft, hard


@contextmanager
def _bounded_setrlimit() -> Iterator[None]:
    """While mlx-lm's module runs, its descriptor request is bounded by `allowed`; other limits pass through."""
    original = resource.setrlimit

    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if which == resource.RLIMIT_NOFILE:
            limits = allowed(limits, resource.getrlimit(resource.RLIMIT_NOFILE))
        original(which, limits)

    resource.setrlimit = setrlimit
    try:
        yield
    finally:
        resource.setrlimit = original


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        with _bounded_setrlimit():
            self.inner.exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds mlx_lm.utils as the path finder does, with its module run under `_bounded_setrlimit`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def keep_descriptor_limits() -> None:
    """Install the finder once, ahead of the path finder (a no-op once mlx_lm.utils is imported)."""
    if _MODULE not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
