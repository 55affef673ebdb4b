"""Wired memory on Metal: while a model is loaded, MLX keeps what the memory plan says its weights
and caches need resident (`mx.set_wired_limit`, as mlx-lm's `wired_limit` does around a
generation), so macOS does not page the weights out between turns; the limit before is put back
when the model is unloaded or Chinwag quits. Elsewhere (the CPU backend) nothing is changed.

Runs on the engine thread (MLX calls); mx is imported inside the functions."""

import logging

log = logging.getLogger(__name__)


def _metal() -> bool:
    import mlx.core as mx

    return bool(mx.metal.is_available())


class WiredLimit:
    """The one owner of the process's wired limit: raised per loaded model, restored once."""

    def __init__(self) -> None:
        self.previous: int | None = None  # the limit before Chinwag raised it (None: not raised)
        self.limit = 0  # the limit set now (0: not raised)

    def raise_to(self, wanted: int) -> int:
        """Wire up to `wanted` bytes (within the device's maximum) on Metal; the limit set, or 0."""
        import mlx.core as mx

        if wanted <= 0 or not _metal():
            return 0
        most = int(mx.device_info()["max_recommended_working_set_size"])
        limit = min(int(wanted), most)
        try:
            previous = mx.set_wired_limit(limit)
        except (RuntimeError, ValueError) as e:  # over the system's own wired limit: keep MLX's default
            log.warning("could not raise the wired memory limit to %d bytes: %s", limit, e)
            return 0
        if self.previous is None:  # a model switch keeps the first limit to put back
            self.previous = int(previous)
        self.limit = limit
        log.info("wired memory limit %d bytes (weights and caches; the device allows %d)", limit, most)
        return limit

    def restore(self) -> None:
        """Put back the limit from before the first raise (the model is unloaded, or Chinwag quits)."""
        if self.previous is None:
            return
        import mlx.core as mx

        mx.synchronize()  # as mlx-lm does: never change the limit under a running evaluation
        mx.set_wired_limit(self.previous)
        self.previous, self.limit = None, 0
