"""The engine thread: one long-lived thread that runs submitted jobs one at a time and owns every
MLX array (lazy arrays cannot cross threads). Imports no MLX."""

import concurrent.futures
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

from engine.errors import ChinwagError
from engine.log import report_bug


def _clear_streams() -> None:
    """Free this thread's MLX streams before it ends: left to thread-exit destructors, they can
    run while the interpreter finalizes and abort the process ("terminate called without an
    active exception", about 1 exit in 40 on a busy machine; mlx asks callers to do this)."""
    mx = sys.modules.get("mlx.core")  # never the first import: OpenBLAS must be loaded before it
    if mx is not None and hasattr(mx, "clear_streams"):
        mx.clear_streams()


class EngineThread:
    """Runs submitted callables one at a time on a single thread that owns every MLX array."""

    def __init__(self) -> None:
        # A job: its future, the callable and its arguments; None ends the thread.
        self._jobs: queue.Queue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.Queue()
        )
        self._thread = threading.Thread(target=self._run, name="chinwag-engine", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((future, fn, args))
        return future

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            _clear_streams()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - never let a job kill the thread
                if isinstance(e, Exception) and not isinstance(e, ChinwagError):
                    # Logged here, on the thread it happened on, even if nobody awaits the result.
                    report_bug(e, f"the engine thread ({getattr(fn, '__name__', 'a job')})")
                future.set_exception(e)

    def waiting(self) -> bool:
        """True while a job waits in the queue: background work yields to it."""
        return not self._jobs.empty()

    def shutdown(self, timeout: float = 10.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
