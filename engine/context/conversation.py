"""One conversation's cache: per-layer KV caches and the exact token ids they hold.

Runs on the engine thread only.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.context.prompt import History

MIN_INITIAL_CAPACITY = 256


def initial_capacity(needed: int, limit: int) -> int:
    """A power of two that fits `needed` tokens, so a short chat reserves little."""
    capacity = MIN_INITIAL_CAPACITY
    while capacity < needed:
        capacity *= 2
    return max(1, min(capacity, _next_pow2(limit)))


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def layer_shapes(model: Any) -> list[tuple[int, int]]:
    """(n_kv_heads, head_dim) of each layer's attention, for mlx-lm llama-like models."""
    shapes = []
    args = getattr(model, "args", None)
    for layer in model.layers:
        attn = getattr(layer, "self_attn", None) or getattr(layer, "attention", None)
        heads = getattr(attn, "n_kv_heads", None) or getattr(args, "num_key_value_heads", None)
        dim = getattr(attn, "head_dim", None) or getattr(args, "head_dim", None)
        if dim is None and args is not None:
            dim = args.hidden_size // args.num_attention_heads
        if not heads or not dim:
            raise ValueError("cannot find the attention shape of this model's layers")
        shapes.append((int(heads), int(dim)))
    return shapes


def supports_contiguous_cache(model: Any) -> bool:
    """Models whose mlx-lm cache is a plain KVCache per layer (no sliding windows, no SSM)."""
    if hasattr(model, "make_cache"):
        from mlx_lm.models.cache import KVCache

        return all(type(c) is KVCache for c in model.make_cache())
    return True


@dataclass
class ConversationCache:
    layers: list
    token_ids: list = field(default_factory=list)
    # Each message's ids as the model saw them, by position, and the window's start.
    history: History = field(default_factory=History)
    # Builds fresh layers for caches that cannot be trimmed (sliding windows, SSM state).
    fresh_layers: Callable[[], list] | None = None

    @classmethod
    def create(cls, model: Any, capacity: int) -> "ConversationCache":
        if supports_contiguous_cache(model):
            layers = [ContiguousAttentionKVCache(h, d, max_seq_len=capacity) for h, d in layer_shapes(model)]
        else:
            from mlx_lm.models.cache import make_prompt_cache

            return cls(layers=make_prompt_cache(model), fresh_layers=lambda: make_prompt_cache(model))
        return cls(layers=layers)

    @property
    def offset(self) -> int:
        return self.layers[0].offset if self.layers else 0

    @property
    def capacity(self) -> int:
        if not self.layers:
            return 0
        first = self.layers[0]
        return getattr(first, "max_seq_len", None) or (
            first.keys.shape[2] if getattr(first, "keys", None) is not None else 0
        )

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.layers)

    def trimmable(self) -> bool:
        return all(c.is_trimmable() for c in self.layers)

    def truncate(self, n_tokens: int) -> None:
        """Keep the first n_tokens; the cache and the id list stay in step."""
        drop = len(self.token_ids) - n_tokens
        if drop <= 0:
            return
        if not self.trimmable():
            self.reset()
            return
        for c in self.layers:
            c.trim(c.offset - n_tokens)
        del self.token_ids[n_tokens:]

    def reset(self) -> None:
        if self.trimmable():
            for c in self.layers:
                c.trim(c.offset)
        else:
            assert self.fresh_layers is not None, "an untrimmable cache is built with fresh_layers"
            self.layers = self.fresh_layers()
        self.token_ids.clear()

    def repair(self) -> None:
        """After an error mid-step or a rejected draft: every layer back to exactly `token_ids`, or empty."""
        target = len(self.token_ids)
        if any(c.offset < target for c in self.layers) or not self.trimmable():
            self.reset()
            return
        for c in self.layers:
            c.trim(c.offset - target)

    def eval(self) -> None:
        mx.eval([c.state for c in self.layers])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
