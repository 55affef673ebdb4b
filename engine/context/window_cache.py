"""A sliding-window attention layer's cache: contiguous, in position order, bounded, trimmable.

mlx-lm gives such layers a `RotatingKVCache`, which writes over its oldest slot once full and so
cannot go back a single token after that. This cache keeps the window in order plus `reserve`
positions behind it, dropping the oldest only in blocks of `reserve`: it holds at most
`window - 1 + 2 * reserve` positions between writes (one prefill chunk more while one is written),
and trims exactly to any position whose window it still holds. Deeper edits go back through the
conversation's checkpoints (engine/context/checkpoints.py), which hold each window's last
`window - 1` positions. The mask restricts every query to its window, so attention sees exactly
the keys a RotatingKVCache would give it.
"""

from typing import Any

import mlx.core as mx
import mlx_lm.models.cache as mlx_lm_cache
from mlx_lm.models.cache import create_attention_mask

from engine.context.kv_cache import ContiguousAttentionKVCache

# Behind the window: what a speculative draft, a regenerate of a short reply or a retried
# message trims without a checkpoint.
DEFAULT_RESERVE = 64


class WindowedKVCache(ContiguousAttentionKVCache):
    def __init__(self, window: int, reserve: int = DEFAULT_RESERVE, dtype: mx.Dtype = mx.float16) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.window, self.reserve = window, max(1, reserve)
        self.start = 0  # the position of the buffer's first slot
        super().__init__(max_seq_len=self.keep + 2 * self.reserve, dtype=dtype)

    @property
    def keep(self) -> int:
        """Positions kept when the oldest are dropped: the window before the next token, and the reserve."""
        return self.window - 1 + self.reserve

    @property
    def held(self) -> int:
        return self.offset - self.start

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        fetched = super().update_and_fetch(keys, values)
        # After the fetch: the keys returned (the mask's) are the buffer as it was.
        if self.held > self.keep + self.reserve:
            self._drop_oldest()
        return fetched

    def _drop_oldest(self) -> None:
        """Keep the newest `keep` positions, in fresh buffers (the old ones may still be read)."""
        held, keep = self.held, self.keep
        keys = mx.zeros(self.keys.shape, self.dtype)
        values = mx.zeros(self.values.shape, self.dtype)
        keys[..., :keep, :] = self.keys[..., held - keep : held, :]
        values[..., :keep, :] = self.values[..., held - keep : held, :]
        self.keys, self.values = keys, values
        self.start = self.offset - keep

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array | str | None:
        # Always an array when the window cuts: the buffer holds more than the window.
        return create_attention_mask(N, self.held, return_array, window_size or self.window)

    def size(self) -> int:
        return min(self.offset, self.window)

    def can_trim_to(self, position: int) -> bool:
        """Whether the window before `position` is still held (everything is, until the first drop)."""
        return 0 <= position <= self.offset and (self.start == 0 or position - (self.window - 1) >= self.start)

    def trim(self, n: int) -> int:
        n = max(0, min(self.held, n))
        self.offset -= n
        return n

    # --- checkpoints -------------------------------------------------------

    def window_state(self, everything: bool = False) -> tuple[mx.array, mx.array, int]:
        """A copy of what the next token's window needs: the last `window - 1` positions (or
        `everything` held), and the offset."""
        n = self.held if everything else min(self.held, self.window - 1)
        if not self.shaped or n == 0:
            return mx.zeros((0,)), mx.zeros((0,)), self.offset
        # Copies (not views): a view would make every later write copy the whole buffer.
        keys = mx.array(self.keys[..., self.held - n : self.held, :])
        values = mx.array(self.values[..., self.held - n : self.held, :])
        return keys, values, self.offset

    def restore_window(self, state: tuple[mx.array, mx.array, int]) -> None:
        keys, values, offset = state
        self.offset = self.peak = offset
        if keys.ndim != 4:  # nothing was held
            self.start = offset
            return
        n = keys.shape[2]
        self.max_seq_len = max(n, self.keep + 2 * self.reserve)
        self._allocate(keys.shape, values.shape, keys.dtype)
        self.keys[..., :n, :] = keys
        self.values[..., :n, :] = values
        self.start = offset - n

    def __deepcopy__(self, memo: dict[int, Any]) -> "WindowedKVCache":
        copy = type(self)(self.window, self.reserve, self.dtype)
        if self.shaped:
            copy.restore_window(self.window_state(everything=True))
        memo[id(self)] = copy
        return copy


mlx_lm_cache.__dict__.setdefault(WindowedKVCache.__name__, WindowedKVCache)
