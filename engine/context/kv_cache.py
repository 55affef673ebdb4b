"""A growing, contiguous KV cache for one attention layer of one conversation.

From SGLang's MLX backend (`ContiguousAttentionKVCache`), whose decode path wrote past
the buffer's end once a sequence outgrew `max_seq_len`. On MLX a slice assignment past
an array's end raises nothing and writes nothing, so both write paths here grow first.

It is the cache object of any mlx-lm attention layer (`offset`, `update_and_fetch`,
`make_mask`). It must not define `bits`: that routes mlx-lm to quantized attention.
Built without shapes, it takes them from its first write: a latent-attention (MLA) layer
writes one head of width `kv_lora_rank` as its "keys" and a rope key as its "values", which
no reading of the config predicts.
It follows mlx-lm's prompt-cache protocol: `copy.deepcopy` (cheap: the valid prefix),
`trim`, `state`/`from_state`, so `save_prompt_cache`/`load_prompt_cache` work on it.
"""

from typing import Any

import mlx.core as mx
import mlx_lm.models.cache as mlx_lm_cache
from mlx_lm.models.cache import create_attention_mask

DEFAULT_MAX_SEQ_LEN = 4096


class ContiguousAttentionKVCache:
    def __init__(
        self,
        n_kv_heads: int | None = None,
        head_dim: int | None = None,
        max_seq_len: int = DEFAULT_MAX_SEQ_LEN,
        dtype: mx.Dtype = mx.float16,
        v_head_dim: int | None = None,
    ) -> None:
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be at least 1, got {max_seq_len}")
        self.initial_capacity = max_seq_len
        self.max_seq_len = max_seq_len
        self.offset = 0
        self.peak = 0  # the most tokens ever held
        self.bytes_copied = 0  # by growth, for the benchmarks
        # Empty placeholders until shaped (they carry the dtype: an mx.Dtype cannot be pickled).
        self.keys: Any = mx.zeros((0,), dtype)
        self.values: Any = mx.zeros((0,), dtype)
        if n_kv_heads and head_dim:
            self._allocate((1, n_kv_heads, 0, head_dim), (1, n_kv_heads, 0, v_head_dim or head_dim), dtype)

    def _allocate(self, k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtype: mx.Dtype) -> None:
        """Empty buffers of `max_seq_len` positions, shaped like `k_shape` and `v_shape` but for length."""
        self.n_kv_heads, self.head_dim = k_shape[1], k_shape[3]
        self.v_heads, self.v_head_dim = v_shape[1], v_shape[3]
        self.keys = mx.zeros((1, self.n_kv_heads, self.max_seq_len, self.head_dim), dtype)
        self.values = mx.zeros((1, self.v_heads, self.max_seq_len, self.v_head_dim), dtype)

    # --- writing -----------------------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Prefill path (any length); single tokens go through `write_token`."""
        n = keys.shape[2]
        if not self.shaped:  # the first write gives the shapes
            self._allocate(keys.shape, values.shape, keys.dtype)
        self._match_dtype(keys.dtype)
        if n == 1:
            self.write_token(keys, values)
        else:
            self._reserve(self.held + n)
            start = self.held
            self.keys[..., start : start + n, :] = keys.astype(self.dtype)
            self.values[..., start : start + n, :] = values.astype(self.dtype)
            self._advance(n)
        return self.get_kv()

    def write_token(self, k: mx.array, v: mx.array) -> None:
        """Decode path: one token of shape (1, n_kv_heads, 1, head_dim)."""
        if k.shape[2] != 1:
            raise ValueError(f"write_token takes one token, got {k.shape[2]}")
        if not self.shaped:
            self._allocate(k.shape, v.shape, k.dtype)
        self._match_dtype(k.dtype)
        self._reserve(self.held + 1)
        pos = self.held
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
        values = mx.zeros((1, self.v_heads, capacity, self.v_head_dim), self.dtype)
        held = self.held
        if held:
            keys[..., :held, :] = self.keys[..., :held, :]
            values[..., :held, :] = self.values[..., :held, :]
            self.bytes_copied += held * self.bytes_per_token
        self.keys, self.values = keys, values
        self.max_seq_len = capacity

    def _match_dtype(self, dtype: mx.Dtype) -> None:
        # An empty cache takes the model's dtype: storing float32 keys as float16
        # would silently change the model's outputs. Later writes are cast.
        if self.held == 0 and dtype != self.dtype:
            self.keys = self.keys.astype(dtype)
            self.values = self.values.astype(dtype)

    # --- reading -----------------------------------------------------------

    @property
    def dtype(self) -> mx.Dtype:
        return self.keys.dtype

    @property
    def shaped(self) -> bool:
        """Whether a write (or the constructor) has given the buffers their shapes."""
        return bool(self.keys.ndim == 4)

    @property
    def held(self) -> int:
        """Positions in the buffer (all of them here; a windowed cache drops the oldest)."""
        return self.offset

    @property
    def bytes_per_token(self) -> int:
        if not self.shaped:
            return 0
        return int((self.n_kv_heads * self.head_dim + self.v_heads * self.v_head_dim) * self.dtype.size)

    def get_kv(self) -> tuple[mx.array, mx.array]:
        """The valid prefix: (keys, values) of shape (1, heads, offset, dim)."""
        assert self.shaped, "read before the first write"
        return self.keys[..., : self.held, :], self.values[..., : self.held, :]

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array | str | None:
        return create_attention_mask(N, self.offset, return_array, window_size)

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.offset == 0

    @property
    def nbytes(self) -> int:
        """Bytes reserved (capacity, not just the valid prefix)."""
        return int(self.keys.nbytes + self.values.nbytes)

    # --- editing -----------------------------------------------------------

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop the last n tokens (regenerate, edit); returns how many were dropped."""
        n = max(0, min(self.offset, n))
        self.offset -= n
        return n

    def can_trim_to(self, position: int) -> bool:
        return 0 <= position <= self.offset

    # --- saving ------------------------------------------------------------

    @property
    def state(self) -> tuple[mx.array, mx.array]:
        keys, values = self.get_kv()
        return keys, values

    @state.setter
    def state(self, v: tuple[mx.array, mx.array]) -> None:
        self.__dict__.update(type(self).from_state(v).__dict__)

    def __deepcopy__(self, memo: dict[int, Any]) -> "ContiguousAttentionKVCache":
        """An independent cache holding a copy of the valid prefix only (no spare capacity)."""
        if not self.shaped:
            copy = type(self)(max_seq_len=self.max_seq_len, dtype=self.dtype)
            memo[id(self)] = copy
            return copy
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
        n = keys.shape[2]
        obj = cls(max_seq_len=max(n, max_seq_len or 0, 1), dtype=keys.dtype)
        obj._allocate(keys.shape, values.shape, keys.dtype)
        if n:
            obj.keys[..., :n, :] = keys
            obj.values[..., :n, :] = values
        obj.offset = obj.peak = n
        return obj


# mlx-lm's load_prompt_cache rebuilds each cache by looking its class name up in its own module.
mlx_lm_cache.__dict__.setdefault(ContiguousAttentionKVCache.__name__, ContiguousAttentionKVCache)
