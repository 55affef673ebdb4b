"""A growing, contiguous KV cache for one attention layer of one conversation.

From SGLang's MLX backend (`ContiguousAttentionKVCache`), whose decode path wrote past
the buffer's end once a sequence outgrew `max_seq_len`. On MLX a slice assignment past
an array's end raises nothing and writes nothing, so both write paths here grow first.

It is the cache object of any mlx-lm attention layer (`offset`, `update_and_fetch`,
`make_mask`). It must not define `bits`: that routes mlx-lm to quantized attention.
It follows mlx-lm's prompt-cache protocol: `copy.deepcopy` (cheap: the valid prefix),
`trim`, `state`/`from_state`, so `save_prompt_cache`/`load_prompt_cache` work on it.
"""

import mlx.core as mx
import mlx_lm.models.cache as mlx_lm_cache
from mlx_lm.models.cache import create_attention_mask

DEFAULT_MAX_SEQ_LEN = 4096


class ContiguousAttentionKVCache:
    def __init__(
        self,
        n_kv_heads: int,
        head_dim: int,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        dtype: mx.Dtype = mx.float16,
        v_head_dim: int | None = None,
    ) -> None:
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be at least 1, got {max_seq_len}")
        self.n_kv_heads = n_kv_heads
        self.head_dim = head_dim
        self.v_head_dim = v_head_dim or head_dim
        self.initial_capacity = max_seq_len
        self.max_seq_len = max_seq_len
        self.offset = 0
        self.peak = 0  # the most tokens ever held
        self.bytes_copied = 0  # by growth, for the benchmarks
        self.keys = mx.zeros((1, n_kv_heads, max_seq_len, head_dim), dtype)
        self.values = mx.zeros((1, n_kv_heads, max_seq_len, self.v_head_dim), dtype)

    # --- writing -----------------------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Prefill path (any length); single tokens go through `write_token`."""
        n = keys.shape[2]
        self._match_dtype(keys.dtype)
        if n == 1:
            self.write_token(keys, values)
        else:
            self._reserve(self.offset + n)
            start = self.offset
            self.keys[..., start : start + n, :] = keys.astype(self.dtype)
            self.values[..., start : start + n, :] = values.astype(self.dtype)
            self._advance(n)
        return self.get_kv()

    def write_token(self, k: mx.array, v: mx.array) -> None:
        """Decode path: one token of shape (1, n_kv_heads, 1, head_dim)."""
        if k.shape[2] != 1:
            raise ValueError(f"write_token takes one token, got {k.shape[2]}")
        self._match_dtype(k.dtype)
        self._reserve(self.offset + 1)
        pos = self.offset
        self.keys[..., pos : pos + 1, :] = k.astype(self.dtype)
        self.values[..., pos : pos + 1, :] = v.astype(self.dtype)
        self._advance(1)

    def _advance(self, n: int) -> None:
        self.offset += n
        self.peak = max(self.peak, self.offset)

    def _reserve(self, required: int) -> None:
        if required > self.max_seq_len:
            self._grow(required)

    def _grow(self, required: int) -> None:
        """Double the capacity until `required` fits; copy only the valid prefix."""
        capacity = self.max_seq_len
        while capacity < required:
            capacity *= 2
        keys = mx.zeros((1, self.n_kv_heads, capacity, self.head_dim), self.dtype)
        values = mx.zeros((1, self.n_kv_heads, capacity, self.v_head_dim), self.dtype)
        if self.offset:
            keys[..., : self.offset, :] = self.keys[..., : self.offset, :]
            values[..., : self.offset, :] = self.values[..., : self.offset, :]
            per_token = (self.head_dim + self.v_head_dim) * self.n_kv_heads * self.dtype.size
            self.bytes_copied += self.offset * per_token
        self.keys, self.values = keys, values
        self.max_seq_len = capacity

    def _match_dtype(self, dtype: mx.Dtype) -> None:
        # An empty cache takes the model's dtype: storing float32 keys as float16
        # would silently change the model's outputs. Later writes are cast.
        if self.offset == 0 and dtype != self.dtype:
            self.keys = self.keys.astype(dtype)
            self.values = self.values.astype(dtype)

    # --- reading -----------------------------------------------------------

    @property
    def dtype(self) -> mx.Dtype:
        # Read from the buffer, not kept as an attribute: an mx.Dtype cannot be pickled or deep-copied.
        return self.keys.dtype

    def get_kv(self) -> tuple[mx.array, mx.array]:
        """The valid prefix: (keys, values) of shape (1, heads, offset, dim)."""
        return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array | str | None:
        return create_attention_mask(N, self.offset, return_array, window_size)

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.offset == 0

    @property
    def nbytes(self) -> int:
        """Bytes reserved (capacity, not just the valid prefix)."""
        return self.keys.nbytes + self.values.nbytes

    # --- editing -----------------------------------------------------------

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop the last n tokens (regenerate, edit); returns how many were dropped."""
        n = max(0, min(self.offset, n))
        self.offset -= n
        return n

    # --- saving ------------------------------------------------------------

    @property
    def state(self) -> tuple[mx.array, mx.array]:
        keys, values = self.get_kv()
        return keys, values

    @state.setter
    def state(self, v: tuple[mx.array, mx.array]) -> None:
        self.__dict__.update(type(self).from_state(v).__dict__)

    def __deepcopy__(self, memo: dict) -> "ContiguousAttentionKVCache":
        """An independent cache holding a copy of the valid prefix only (no spare capacity)."""
        copy = type(self).from_state(self.state)
        copy.initial_capacity, copy.peak, copy.bytes_copied = self.initial_capacity, self.peak, self.bytes_copied
        memo[id(self)] = copy
        return copy

    @classmethod
    def from_state(
        cls, state: tuple[mx.array, mx.array], max_seq_len: int | None = None
    ) -> "ContiguousAttentionKVCache":
        """Restore a cache from `state`, reserving `max_seq_len` if given."""
        keys, values = state
        _, heads, n, head_dim = keys.shape
        obj = cls(heads, head_dim, max(n, max_seq_len or 0, 1), keys.dtype, values.shape[-1])
        if n:
            obj.keys[..., :n, :] = keys
            obj.values[..., :n, :] = values
        obj.offset = obj.peak = n
        return obj


# mlx-lm's load_prompt_cache rebuilds each cache by looking its class name up in its own module.
mlx_lm_cache.__dict__.setdefault(ContiguousAttentionKVCache.__name__, ContiguousAttentionKVCache)
