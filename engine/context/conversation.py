"""One conversation's cache: per-layer KV caches and the exact token ids they hold.

Runs on the engine thread only.
"""

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache

from engine.context import kinds
from engine.context.checkpoints import Checkpoint, Checkpoints
from engine.context.prompt import History
from engine.context.window_cache import WindowedKVCache
from engine.types import KVQuantization

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


@dataclass
class ConversationCache:
    layers: list[Any]
    token_ids: list[int] = field(default_factory=list)
    # Each message's ids as the model saw them, by position, and the window's start.
    history: History = field(default_factory=History)
    # Copies of the caches that cannot trim, by position (engine/context/checkpoints.py).
    checkpoints: Checkpoints = field(default_factory=Checkpoints)

    @classmethod
    def create(cls, model: Any, capacity: int, quant: KVQuantization | None = None) -> "ConversationCache":
        return cls(layers=kinds.make_layers(model, capacity, quant))

    @property
    def offset(self) -> int:
        """The tokens held: the conversation's own count (a recurrent layer has no offset)."""
        return len(self.token_ids)

    def leaves(self) -> list[Any]:
        return list(kinds.leaves(self.layers))

    @property
    def capacity(self) -> int:
        """Positions reserved by the first growing layer (the tokens held if there is none)."""
        for c in self.leaves():
            if kinds.trims_exactly(c) and not isinstance(c, WindowedKVCache):
                return int(c.max_seq_len)
        return len(self.token_ids)

    @property
    def nbytes(self) -> int:
        return int(sum(c.nbytes for c in self.leaves())) + self.checkpoints.nbytes

    def can_trim_to(self, position: int) -> bool:
        n = len(self.token_ids)
        return all(kinds.can_trim_to(c, position, n) for c in self.leaves())

    def checkpoint(self) -> None:
        """Remember the caches that cannot trim as they are now (nothing when every layer trims)."""
        held = [c for c in self.leaves() if kinds.held_back(c)]
        if not held or not self.token_ids:
            return
        self.checkpoints.add(kinds.checkpoint(len(self.token_ids), tuple(kinds.save(c) for c in held)))

    def truncate(self, n_tokens: int) -> int:
        """Keep at most the first n_tokens: by trimming, else from the latest checkpoint at or before
        them, else from nothing. Returns the tokens kept; the cache and the ids stay in step."""
        n_tokens = max(0, min(n_tokens, len(self.token_ids)))
        if n_tokens == len(self.token_ids):
            return n_tokens
        return self._back_to(n_tokens, trim=True)

    def _back_to(self, n_tokens: int, trim: bool) -> int:
        if trim and self.can_trim_to(n_tokens):
            for c in self.leaves():
                kinds.trim_to(c, n_tokens)
            return self._kept(n_tokens)
        point = self.checkpoints.at_or_before(n_tokens)
        while point is not None and not self._restore(point):
            point = self.checkpoints.at_or_before(point.position - 1)
        if point is None:
            self.reset()
            return 0
        return self._kept(point.position)

    def _restore(self, point: Checkpoint) -> bool:
        """Bring every layer back to `point`: False if a layer without a copy cannot trim there."""
        n = len(self.token_ids)
        if not all(kinds.held_back(c) or kinds.can_trim_to(c, point.position, n) for c in self.leaves()):
            return False
        states = iter(point.states)
        for c in self.leaves():
            if kinds.held_back(c):
                kinds.restore(c, next(states))
            else:
                kinds.trim_to(c, point.position)
        return True

    def _kept(self, n_tokens: int) -> int:
        del self.token_ids[n_tokens:]
        self.checkpoints.drop_after(n_tokens)
        return n_tokens

    def reset(self) -> None:
        for c in self.leaves():
            kinds.reset(c)
        self.token_ids.clear()
        self.checkpoints.clear()

    def repair(self) -> None:
        """After an error mid-step or a rejected draft: every layer back to exactly `token_ids`, or
        to the checkpoint before them (a failed step may have moved recurrent state), or empty."""
        target = len(self.token_ids)
        attention = [c for c in self.leaves() if not isinstance(c, ArraysCache)]
        if any(c.offset < target for c in attention):
            self.reset()
            return
        for c in attention:
            c.trim(c.offset - target)
        if len(attention) < len(self.leaves()):
            self._back_to(target, trim=False)

    def fork(self, n_tokens: int, history: History, reserve: int = 0) -> "ConversationCache":
        """An independent cache of this one's first `n_tokens` (or the checkpoint before them); its
        growing layers copy only those and reserve room for `reserve` positions."""
        layers = [kinds.copy(c, n_tokens, reserve) for c in self.layers]
        twin = ConversationCache(layers, list(self.token_ids), history)
        twin.checkpoints.items = list(self.checkpoints.items)  # never changed in place: shared
        twin.truncate(n_tokens)
        twin.eval()
        return twin

    def eval(self) -> None:
        mx.eval([a for c in self.leaves() for a in kinds.arrays(c)])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
