"""A plain attention layer's cache stored quantized (`--kv-bits`): growing, contiguous, exact to trim.

Like `ContiguousAttentionKVCache`, one buffer per conversation that doubles before it is written
past, trimmed by moving its offset; but keys and values are kept as MLX's quantized triples
(packed uint32 values, scales, biases per group of `group_size`), written with `mx.quantize` as
they arrive. It defines `bits` and `group_size`, which route mlx-lm's attention to
`quantized_scaled_dot_product_attention`: the cache is read quantized, never dequantized whole.
"""

from typing import Any

import mlx.core as mx
import mlx_lm.models.cache as mlx_lm_cache
from mlx_lm.models.cache import create_attention_mask

from engine.errors import ChinwagError


class QuantizedContiguousKVCache:
    def __init__(self, bits: int, group_size: int = 64, max_seq_len: int = 256) -> None:
        self.bits, self.group_size = bits, group_size
        self.max_seq_len = max(1, max_seq_len)
        self.offset = 0
        self.keys: Any = None  # (packed, scales, biases), each (1, heads, capacity, ...)
        self.values: Any = None

    @property
    def held(self) -> int:
        return self.offset

    @property
    def shaped(self) -> bool:
        return self.keys is not None

    def _allocate(
        self, k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtype: mx.Dtype, capacity: int
    ) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Empty (packed, scales, biases) buffers, shaped as mx.quantize shapes one position."""

        def triple(shape: tuple[int, ...]) -> tuple[Any, ...]:
            heads, dim = shape[1], shape[3]
            if dim % self.group_size:
                raise ChinwagError(
                    f"a quantized KV cache needs head dimensions that are multiples of its group size "
                    f"{self.group_size} (--kv-group-size); this model's are {dim}"
                )
            sample = mx.quantize(mx.zeros((1, heads, 1, dim), dtype), group_size=self.group_size, bits=self.bits)
            return tuple(mx.zeros((1, heads, capacity, q.shape[3]), q.dtype) for q in sample)

        return triple(k_shape), triple(v_shape)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        n = keys.shape[2]
        if self.keys is None:
            self.keys, self.values = self._allocate(keys.shape, values.shape, keys.dtype, self.max_seq_len)
        if self.offset + n > self.max_seq_len:
            self._grow(self.offset + n)
        qk = mx.quantize(keys, group_size=self.group_size, bits=self.bits)
        qv = mx.quantize(values, group_size=self.group_size, bits=self.bits)
        start, end = self.offset, self.offset + n
        for buffer, part in ((self.keys, qk), (self.values, qv)):
            for array, q in zip(buffer, part):
                array[..., start:end, :] = q
        self.offset = end
        return self.get_kv()

    def _grow(self, required: int) -> None:
        """Double the capacity until `required` fits; copy only the valid prefix."""
        capacity = self.max_seq_len
        while capacity < required:
            capacity *= 2
        grown = []
        for buffer in (self.keys, self.values):
            new = tuple(mx.zeros((*a.shape[:2], capacity, a.shape[3]), a.dtype) for a in buffer)
            for a, b in zip(new, buffer):
                a[..., : self.offset, :] = b[..., : self.offset, :]
            grown.append(new)
        self.keys, self.values = grown
        self.max_seq_len = capacity

    def get_kv(self) -> tuple[Any, Any]:
        n = self.offset
        return tuple(a[..., :n, :] for a in self.keys), tuple(a[..., :n, :] for a in self.values)

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> mx.array | str | None:
        return create_attention_mask(N, self.offset, return_array, window_size)

    @property
    def dtype(self) -> mx.Dtype:
        return self.keys[1].dtype if self.keys is not None else mx.float32

    @property
    def bytes_per_token(self) -> int:
        if self.keys is None:
            return 0
        return sum(a.nbytes // a.shape[2] for buffer in (self.keys, self.values) for a in buffer)

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(a.nbytes for buffer in (self.keys, self.values) for a in buffer)

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.offset == 0

    def is_trimmable(self) -> bool:
        return True

    def can_trim_to(self, position: int) -> bool:
        return 0 <= position <= self.offset

    def trim(self, n: int) -> int:
        n = max(0, min(self.offset, n))
        self.offset -= n
        return n

    @property
    def state(self) -> tuple[Any, ...]:
        return self.get_kv()

    @classmethod
    def from_parts(
        cls, keys: tuple[Any, ...], values: tuple[Any, ...], bits: int, group_size: int, max_seq_len: int = 0
    ) -> "QuantizedContiguousKVCache":
        """A cache holding the quantized `keys` and `values` triples (a fork's copy, a saved file)."""
        n = keys[0].shape[2]
        obj = cls(bits, group_size, max(n, max_seq_len, 1))
        obj.keys = tuple(mx.zeros((*a.shape[:2], obj.max_seq_len, a.shape[3]), a.dtype) for a in keys)
        obj.values = tuple(mx.zeros((*a.shape[:2], obj.max_seq_len, a.shape[3]), a.dtype) for a in values)
        for buffer, part in ((obj.keys, keys), (obj.values, values)):
            for a, b in zip(buffer, part):
                a[..., :n, :] = b
        obj.offset = n
        return obj

    def __deepcopy__(self, memo: dict[int, Any]) -> "QuantizedContiguousKVCache":
        if self.keys is None:
            copy = type(self)(self.bits, self.group_size, self.max_seq_len)
        else:
            keys, values = self.get_kv()
            copy = type(self).from_parts(keys, values, self.bits, self.group_size)
        memo[id(self)] = copy
        return copy


mlx_lm_cache.__dict__.setdefault(QuantizedContiguousKVCache.__name__, QuantizedContiguousKVCache)
